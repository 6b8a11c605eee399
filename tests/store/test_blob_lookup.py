"""Whether a blob is already stored decides what a publish stages; it is asked by one listing of ``blobs/`` or
a ``stat`` each (blob_check.blob_lookup), and either way a re-publish stages only content the store lacks: every
blob already there keeps its inode (staging it again would rename a new file over it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.engine import blob_check
from tests.support.stores import tree_object_names


def _tree(root: Path, changed: bool = False) -> Path:
    for n in range(12):
        (root / f"d{n % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{n % 3}" / f"f{n}").write_bytes(f"content {n}{' changed' if changed and n == 5 else ''}\n".encode())
    return root


def _inodes(store: Store) -> dict[str, int]:
    blobs = store.layout.blobs_dir
    return {name: os.lstat(os.path.join(blobs, name)).st_ino for name in os.listdir(blobs)}


@pytest.mark.parametrize("junk", [0, 3000], ids=["small-blobs-dir", "large-blobs-dir"])
@pytest.mark.parametrize("per_lookup", [0, 10**9], ids=["stat-each", "one-listing"])
def test_a_republish_stages_only_content_the_store_lacks(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, per_lookup: int, junk: int) -> None:
    # per_lookup 0: a stat each (a blobs dir with any entry is "larger" than the lookups); 10**9: one listing.
    # The junk: a blobs dir far larger than the tree, as a store holding other versions' blobs.
    monkeypatch.setattr(blob_check, "LIST_BLOBS_PER_LOOKUP", per_lookup)
    store = Store(fast_tmp / "store")
    store.publish(_tree(fast_tmp / "src"), "demo")
    for n in range(junk):
        (Path(store.layout.blobs_dir) / f"junk-{n:05d}").touch()
    before = _inodes(store)
    ref = store.publish(_tree(fast_tmp / "src", changed=True), "demo")
    after = _inodes(store)
    assert {name: after[name] for name in before} == before  # nothing stored was staged and renamed again
    new = set(after) - set(before)
    objects = new & set(tree_object_names(store))
    # The one changed file's content, nothing else: every file was written again (new mtimes), so each of the three
    # directories' tree objects and the root's are new too.
    assert len(new - objects) == 1 and len(objects) == 4
    store.download(ref, fast_tmp / "out")
    assert (fast_tmp / "out" / "d2" / "f5").read_bytes() == b"content 5 changed\n"

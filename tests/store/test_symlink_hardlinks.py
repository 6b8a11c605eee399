"""One symlink inode under several names (``ln -P``, as ostree checkouts and ``cp -al`` make them) is a hard link
like a file's: recorded as one, restored as one inode, the same on both engines. ``cp -a`` keeps it; each name
was restored as a symlink of its own before. A forged manifest joining two different links is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store, assert_metadata_equal
from artifactkit.engine.reference.scan import capture_tree
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.hostile_store import forge_manifest, manifest_doc


def _tree(src: Path) -> None:
    (src / "d").mkdir(parents=True)
    (src / "file").write_bytes(b"content")
    os.symlink("file", src / "ln")
    os.link(src / "ln", src / "ln2", follow_symlinks=False)
    os.link(src / "ln", src / "d" / "ln3", follow_symlinks=False)
    os.symlink("elsewhere", src / "alone")
    for name in ("ln", "alone"):
        os.utime(src / name, ns=(1_000_000_000_123_456_789, 900_000_000_987_654_321), follow_symlinks=False)


def _inodes(root: Path) -> set[int]:
    return {os.lstat(root / name).st_ino for name in ("ln", "ln2", "d/ln3")}


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_hard_linked_symlink_is_one_inode_after_a_round_trip(noatime_tree: Path, engine: str) -> None:
    src = noatime_tree / "src"
    _tree(src)
    with running_on(engine):
        store = Store(noatime_tree / "store")
        ref = store.publish(src, "t")
        store.download(ref, noatime_tree / "out")
    entries = {e.path: e for e in store.manifest(ref).entries}
    # The first name in path order is the one the others name.
    assert (entries["ln"].hardlink, entries["ln2"].hardlink, entries["d/ln3"].hardlink) == ("d/ln3", "d/ln3", None)
    out = noatime_tree / "out"
    assert len(_inodes(out)) == 1 and os.lstat(out / "ln").st_nlink == 3
    assert os.readlink(out / "d" / "ln3") == "file"
    assert_metadata_equal(capture_tree(src), capture_tree(out), stage="download")


def test_both_engines_record_a_hard_linked_symlink_in_the_same_bytes(noatime_tree: Path) -> None:
    src = noatime_tree / "src"
    _tree(src)
    made = {}
    for engine in ENGINE_NAMES:
        with running_on(engine):
            store = Store(noatime_tree / f"store-{engine}")
            made[engine] = store.manifest(store.publish(src, "t")).to_bytes()
    assert made["python"] == made["native"]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_manifest_joining_two_different_symlinks_is_refused(noatime_tree: Path, engine: str) -> None:
    src = noatime_tree / "src"
    _tree(src)
    store = Store(noatime_tree / "store")
    ref = store.publish(src, "t")
    doc = manifest_doc(store, ref)
    for entry in doc["entries"]:
        if entry["path"] == "alone":
            entry["hardlink"] = "d/ln3"  # a link to "file" cannot be the inode of a link to "elsewhere"
    forge_manifest(store, "t", 1, json.dumps(doc).encode())
    with running_on(engine), pytest.raises(IntegrityError, match="'alone' is a hard link to 'd/ln3', which is not an "
                                                                 "earlier symlink of this manifest with the same"):
        store.download("t@1", noatime_tree / "out")
    assert not (noatime_tree / "out").exists()

"""A forged manifest describing a deep tree, against download (issue 48, class 4).

A tree 1,200 levels deep whose download failed (a blob that does not match) was an internal ``RecursionError``
out of the cleanup, and it left the private directory beside the destination, which the next download to that
name then tripped over the same way: every later download failed until someone removed it by hand. Now the
deepest path a manifest may hold is the longest one the kernel takes (``PATH_MAX``: 2,048 levels of one-byte
names), a deeper one is :class:`TreeTooDeepError` before anything is written, and whatever a download made is
removed without recursion, so the next download works.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store
from artifactkit._fsutil import remove_tree
from artifactkit.errors import TreeTooDeepError
from artifactkit.manifest.limits import MAX_PATH_BYTES, MAX_TREE_DEPTH
from tests.support.hostile_manifest import DATA, SHA, body, doc, file_entry
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    """An empty store (local or bucket) holding the blob of :data:`DATA`; ``work/`` for destinations."""
    store = store_of_kind(request.param, request, fast_tmp)
    put_blob(store, SHA, DATA)
    (fast_tmp / "work").mkdir()
    return store


def _chain(depth: int, name: str = "a") -> bytes:
    """A manifest of the file of :data:`DATA` ``depth`` levels deep: ``name/name/.../name``, every name above
    it a directory."""
    parts = [name] * depth
    dirs = [{"path": "/".join(parts[:level]), "kind": "dir", "mode": 0o755, "mtime_ns": 1, "atime_ns": 2}
            for level in range(1, depth)]
    return body(doc(*dirs, file_entry(path="/".join(parts))))


def _bottom(dest: Path, depth: int, name: str = "a") -> bytes:
    """The bytes of the file ``depth`` levels down, read through one fd per level (no path that long is needed)."""
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth - 1):
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
        leaf = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with open(leaf, "rb") as handle:
        return handle.read()


def test_a_deep_tree_whose_download_fails_leaves_nothing_and_the_next_download_to_that_name_works(
        store: Store, fast_tmp: Path) -> None:
    # 1,200 levels: past the interpreter's 1,000 frames, well inside PATH_MAX (a 2,399-byte path).
    work, depth = fast_tmp / "work", 1200
    forge_manifest(store, "demo", 1, _chain(depth))
    put_blob(store, SHA, DATA.upper())  # same size, other bytes: found only once the tree is made
    for _ in range(2):  # the second time too: nothing the first left may stand in its way
        with pytest.raises(IntegrityError, match="corrupt"):
            store.download("demo", work / "out")
        assert os.listdir(work) == []
    put_blob(store, SHA, DATA)
    store.download("demo", work / "out")
    assert os.listdir(work) == ["out"] and _bottom(work / "out", depth) == DATA
    remove_tree(work / "out")
    assert os.listdir(work) == []


def test_the_deepest_tree_a_manifest_may_describe_downloads(store: Store, fast_tmp: Path) -> None:
    # One-byte names: the bottom file's path, "a/a/.../a" 2,048 levels deep, is the longest a manifest may hold.
    work = fast_tmp / "work"
    assert len("/".join(["a"] * MAX_TREE_DEPTH)) == MAX_PATH_BYTES
    forge_manifest(store, "demo", 1, _chain(MAX_TREE_DEPTH))
    store.download("demo", work / "out")
    assert _bottom(work / "out", MAX_TREE_DEPTH) == DATA
    remove_tree(work / "out")


@pytest.mark.parametrize(("depth", "name"), [(MAX_TREE_DEPTH + 1, "a"), (1200, "abcdefgh")],
                         ids=["one-byte-past-path-max", "1200-levels-of-8-byte-names"])
def test_a_tree_deeper_than_a_path_can_reach_is_refused_by_name_before_anything_is_written(
        store: Store, fast_tmp: Path, depth: int, name: str) -> None:
    work = fast_tmp / "work"
    forge_manifest(store, "demo", 1, _chain(depth, name))
    with pytest.raises(TreeTooDeepError, match="PATH_MAX") as caught:
        store.download("demo", work / "out")
    assert len(str(caught.value)) < 500  # names the path shortened, not 10 KB of it
    assert os.listdir(work) == []
    report = store.verify()
    assert not report.ok and any("demo@1" in item and "PATH_MAX" in item for item in report.unreadable), report
    forge_manifest(store, "demo", 1, _chain(3, name))
    store.download("demo", work / "out")  # the same destination: nothing was left in its way
    assert _bottom(work / "out", 3, name) == DATA

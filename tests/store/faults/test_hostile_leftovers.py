"""Leftovers a writer of the store planted in ``staging/`` or ``blobs/``: gc measures them with a walk of its own,
so a chain of directories as deep as the writer likes ends in one named error before gc removes anything from that
directory (it was a ``RecursionError`` out of gc at 1,200 levels), while anything the store could make goes as
before. (gc sweeps ``staging/`` before it marks and sweeps ``blobs/``, as with an unreadable manifest.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.errors import UnsafeStoreError
from artifactkit.store.local_backend import LEFTOVER_DEPTH


def _chain(top: Path, name: str, depth: int) -> None:
    """``top/name/x/x/...``: ``depth`` directories, one file at the bottom (made by fd: no path is that long)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for part in [name] + ["x"] * (depth - 1):
        os.mkdir(part, dir_fd=fd)
        below = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as bottom:
        bottom.write(b"leftover")
    os.close(fd)


def _store(tmp: Path) -> Store:
    (tmp / "src").mkdir()
    (tmp / "src" / "a").write_bytes(b"a")
    store = Store(tmp / "store")
    store.publish(tmp / "src", "demo")
    return store


@pytest.mark.parametrize("place", ["staging", "blobs"])
def test_a_leftover_deeper_than_any_store_makes_is_one_named_error_and_gc_removes_nothing_there(
        fast_tmp: Path, place: str) -> None:
    store = _store(fast_tmp)
    top = Path(store.root) / place
    _chain(top, "junk", 1200)
    try:
        before = sorted(os.listdir(top))
        for dry_run in (True, False):
            with pytest.raises(UnsafeStoreError, match=rf"^{top}/junk is nested more than {LEFTOVER_DEPTH} "
                               rf"directories deep, which no store makes: gc stops before it removes anything "
                               rf"from {top}; remove it by hand \(rm -rf\)$"):
                store.gc(dry_run=dry_run)
        assert sorted(os.listdir(top)) == before
        assert [str(ref) for ref in store.list()] == ["demo@1"]
    finally:  # the test's own cleanup recurses too: rm walks any depth
        subprocess.run(["rm", "-rf", "--", str(top / "junk")], check=True)
    assert store.gc().removed_blobs == [] and store.verify().ok


@pytest.mark.parametrize("place", ["staging", "blobs"])
def test_a_leftover_as_deep_as_gc_walks_is_measured_and_removed(fast_tmp: Path, place: str) -> None:
    store = _store(fast_tmp)
    top = Path(store.root) / place
    _chain(top, "junk", LEFTOVER_DEPTH)
    planned = store.gc(dry_run=True)
    assert (Path(top) / "junk").exists()
    done = store.gc()
    assert not (Path(top) / "junk").exists()
    assert done.freed_bytes == planned.freed_bytes > 0
    assert [str(ref) for ref in store.list()] == ["demo@1"] and store.verify().ok

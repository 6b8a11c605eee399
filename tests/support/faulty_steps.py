"""Deliberately faulty restore steps, each a real-world bug class the shared assertion must catch.

Each has the signature of the store's restore seam
(``restore_tree(entries, dest, blob_path=, owners=, engine=, progress=)``)
so a test can swap one into a real :class:`Store` and watch the download stage fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable

from artifactkit.manifest.paths import ROOT
from artifactkit.metadata.model import FileMeta

NS = 1_000_000_000


def _naive_restore(entries: Iterable[FileMeta], dest: str, blob_path: Callable[[str], str],
                   times: Callable[[FileMeta], tuple[int, int] | None]) -> None:
    ordered = sorted(entries, key=lambda e: e.path)
    os.mkdir(dest)
    for entry in ordered:
        full = os.path.join(dest, entry.path)
        if entry.kind == "dir" and entry.path != ROOT:
            os.mkdir(full)
        elif entry.kind == "file":
            assert entry.sha256 is not None
            shutil.copyfile(blob_path(entry.sha256), full)
            os.chmod(full, entry.mode)
        elif entry.kind == "symlink":
            assert entry.target is not None
            os.symlink(entry.target, full)
    for entry in sorted(ordered, key=lambda e: -1 if e.path == ROOT else -e.path.count("/") - 1):
        full = os.path.join(dest, entry.path)
        if entry.kind == "dir":
            os.chmod(full, entry.mode)
        wanted = times(entry)
        if wanted is not None:
            os.utime(full, ns=wanted, follow_symlinks=entry.kind != "symlink")


def restore_omitting_atime(entries: Iterable[FileMeta], dest: str, *, blob_path: Callable[[str], str],
                           owners: str = "exact", engine: object = None, progress: object = None) -> tuple[str, ...]:
    """Sets mtime and keeps whatever atime the copy left (``utime`` with the current atime)."""
    def times(entry: FileMeta) -> tuple[int, int]:
        full = os.path.join(dest, entry.path)
        return os.lstat(full).st_atime_ns, entry.mtime_ns
    _naive_restore(entries, dest, blob_path, times)
    return ()  # verified nothing, claims nothing unverified: what a faulty restore does


def restore_truncating_to_seconds(entries: Iterable[FileMeta], dest: str, *, blob_path: Callable[[str], str],
                                  owners: str = "exact", engine: object = None,
                                  progress: object = None) -> tuple[str, ...]:
    """Sets times from whole seconds (``int(st.st_atime)``-style code)."""
    _naive_restore(entries, dest, blob_path,
                   lambda e: ((e.atime_ns // NS) * NS, (e.mtime_ns // NS) * NS))
    return ()


def restore_through_float(entries: Iterable[FileMeta], dest: str, *, blob_path: Callable[[str], str],
                           owners: str = "exact", engine: object = None, progress: object = None) -> tuple[str, ...]:
    """Sets times through float seconds (``os.utime(p, (st.st_atime, st.st_mtime))``)."""
    def times(entry: FileMeta) -> tuple[int, int]:
        full = os.path.join(dest, entry.path)
        os.utime(full, (entry.atime_ns / NS, entry.mtime_ns / NS), follow_symlinks=entry.kind != "symlink")
        st = os.lstat(full)
        return st.st_atime_ns, st.st_mtime_ns
    _naive_restore(entries, dest, blob_path, times)
    return ()  # verified nothing, claims nothing unverified: what a faulty restore does



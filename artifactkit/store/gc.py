"""``gc``: remove staging leftovers and unreferenced blobs, under the store's exclusive lock."""

from __future__ import annotations

import os
import shutil
import stat

import attrs

from artifactkit.errors import IntegrityError
from artifactkit.store.store_dirs import StoreDirs, listdir_fd
from artifactkit.store.verify import referenced_blobs

#: ``st_blocks`` counts 512-byte units on Linux whatever the filesystem's block size (stat(2)).
_BLOCK_UNIT = 512


@attrs.frozen
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove).

    ``freed_bytes`` is the space given back to the filesystem: the blocks allocated to every removed inode
    (``st_blocks`` x 512, so a sparse blob counts its data, not its holes) whose last name it removed, in
    ``blobs/`` and in ``staging/`` alike — a killed publish's staged blobs are most of what it leaves.
    """

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int
    dry_run: bool = False


def collect_garbage(dirs: StoreDirs, *, dry_run: bool = False) -> GcReport:
    """Remove staging leftovers and unreferenced blobs; the caller holds the exclusive lock.

    Every name is removed through the layout directory's checked fd (:mod:`~artifactkit.store.store_dirs`),
    and ``rmtree`` with ``dir_fd`` never follows a link: nothing outside the store can be reached (nor
    measured: :func:`_allocated` walks with ``dir_fd`` and ``O_NOFOLLOW`` too). An unreadable manifest stops
    the blob sweep: nobody can say which blobs it needs. ``dry_run``: the same answer, nothing removed.
    """
    removed_staging, freed = [], 0
    for name in listdir_fd(dirs.staging):
        st = os.lstat(name, dir_fd=dirs.staging)
        freed += _allocated(dirs.staging, name, st)
        if not dry_run:
            _remove(dirs.staging, name, st)  # a stray file or link in staging/ is a leftover too
        removed_staging.append(name)
    unreadable: list[str] = []
    needed = referenced_blobs(dirs, unreadable, unreadable)
    if unreadable:
        raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                             + "; ".join(unreadable), path=dirs.layout.root)
    removed_blobs = []
    for name in listdir_fd(dirs.blobs):
        if name in needed:
            continue
        st = os.lstat(name, dir_fd=dirs.blobs)
        freed += _allocated(dirs.blobs, name, st)
        if not dry_run:
            _remove(dirs.blobs, name, st)  # a directory here is not a blob at all: it goes too
        removed_blobs.append(name)
    if removed_blobs and not dry_run:
        os.fsync(dirs.blobs)
    return GcReport(removed_blobs=removed_blobs, removed_staging=removed_staging, freed_bytes=freed,
                    dry_run=dry_run)


def _remove(parent_fd: int, name: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def _allocated(parent_fd: int, name: str, st: os.stat_result) -> int:
    """Bytes that removing ``name`` (and, for a directory, everything under it) gives back: the blocks of
    every inode whose last name goes with it (a file with another name frees nothing)."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * _BLOCK_UNIT if st.st_nlink <= 1 else 0
    total = st.st_blocks * _BLOCK_UNIT
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        for child in os.listdir(fd):
            total += _allocated(fd, child, os.lstat(child, dir_fd=fd))
    finally:
        os.close(fd)
    return total

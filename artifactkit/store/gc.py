"""``gc``: remove staging leftovers and unreferenced blobs, under the store's exclusive lock."""

from __future__ import annotations

import os
import shutil
import stat

import attrs

from artifactkit.errors import IntegrityError
from artifactkit.store.store_dirs import StoreDirs, listdir_fd
from artifactkit.store.verify import referenced_blobs


@attrs.frozen
class GcReport:
    """What ``gc`` removed."""

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int


def collect_garbage(dirs: StoreDirs) -> GcReport:
    """Remove staging leftovers and unreferenced blobs; the caller holds the exclusive lock.

    Every name is removed through the layout directory's checked fd (:mod:`~artifactkit.store.store_dirs`),
    and ``rmtree`` with ``dir_fd`` never follows a link: nothing outside the store can be reached.
    An unreadable manifest stops the blob sweep: nobody can say which blobs it needs.
    """
    removed_staging = []
    for name in listdir_fd(dirs.staging):
        if stat.S_ISDIR(os.lstat(name, dir_fd=dirs.staging).st_mode):
            shutil.rmtree(name, dir_fd=dirs.staging)
        else:
            os.unlink(name, dir_fd=dirs.staging)  # a stray file or link in staging/ is a leftover too
        removed_staging.append(name)
    unreadable: list[str] = []
    needed = referenced_blobs(dirs, unreadable, unreadable)
    if unreadable:
        raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                             + "; ".join(unreadable), path=dirs.layout.root)
    removed_blobs, freed = [], 0
    for name in listdir_fd(dirs.blobs):
        if name in needed:
            continue
        st = os.lstat(name, dir_fd=dirs.blobs)
        freed += st.st_size
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dirs.blobs)  # not a blob at all: blobs are files
        else:
            os.unlink(name, dir_fd=dirs.blobs)
        removed_blobs.append(name)
    if removed_blobs:
        os.fsync(dirs.blobs)
    return GcReport(removed_blobs=removed_blobs, removed_staging=removed_staging, freed_bytes=freed)

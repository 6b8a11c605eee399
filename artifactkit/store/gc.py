"""``gc``: remove staging leftovers and unreferenced blobs, under the store's exclusive lock."""

from __future__ import annotations

import os
import shutil
import stat

import attrs

from artifactkit._syscalls import fsync_dir
from artifactkit.errors import IntegrityError
from artifactkit.store.layout import StoreLayout
from artifactkit.store.verify import listdir_sorted, referenced_blobs


@attrs.frozen
class GcReport:
    """What ``gc`` removed."""

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int


def collect_garbage(layout: StoreLayout) -> GcReport:
    """Remove staging leftovers and unreferenced blobs; the caller holds the exclusive lock.

    An unreadable manifest stops the blob sweep: nobody can say which blobs it needs.
    """
    removed_staging = []
    for name in listdir_sorted(layout.staging_dir):
        path = os.path.join(layout.staging_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)  # a stray file or link in staging/ is a leftover too
        removed_staging.append(name)
    unreadable: list[str] = []
    needed = referenced_blobs(layout, unreadable, unreadable)
    if unreadable:
        raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                             + "; ".join(unreadable), path=layout.root)
    removed_blobs, freed = [], 0
    for name in listdir_sorted(layout.blobs_dir):
        if name in needed:
            continue
        path = os.path.join(layout.blobs_dir, name)
        st = os.lstat(path)
        freed += st.st_size
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # not a blob at all: blobs are files
        else:
            os.unlink(path)
        removed_blobs.append(name)
    if removed_blobs:
        fsync_dir(layout.blobs_dir)
    return GcReport(removed_blobs=removed_blobs, removed_staging=removed_staging, freed_bytes=freed)

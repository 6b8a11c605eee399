"""A local store's side of ``forget``: the hold a download keeps on its version, the removal of versions, and the
marker that keeps a forgotten newest version's number from being claimed again.

============================================  =========================================================
a version's manifest file                     ``flock`` shared by each download of it, from before its
                                              manifest is read until its last blob is; ``forget`` takes
                                              it exclusively (never waiting) before it unlinks the file
``locks/names/<name>.lock``                   exclusive while ``forget`` removes versions of ``name`` —
                                              the lock a publisher's claim takes (``locks.name_lock``)
``manifests/<name>/<version>.forgotten``      empty: ``version`` was the newest when it was forgotten,
                                              so a claim takes a number above it
============================================  =========================================================

The manifest file itself is the lock: it exists exactly while the version does, a reader who may not write the
store can still take a shared ``flock`` on it, and no lock file is left behind per version. A download that waits
for a ``forget`` holding it finds the name unlinked (``st_nlink`` 0) and stops with ``LookupError``; ``gc`` needs
nothing new: a held version's manifest stays, so it still marks the blobs the download reads.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from collections.abc import Collection, Iterator, Sequence
from typing import Final

from artifactkit.errors import VersionInUseError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.layout import VERSION_FILE
from artifactkit.store.locks import name_lock
from artifactkit.store.store_dirs import StoreDirs, fsync_fd_dir

#: ``<version>.forgotten``: the marker of a forgotten newest version (digits as a version file's).
FORGOTTEN_FILE: Final = re.compile(r"([1-9][0-9]*)\.forgotten", re.ASCII)
_MANIFEST_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO planted there never blocks


def highest_taken(dirs: StoreDirs, name: str) -> int:
    """The highest version number ``name`` has used: its versions' and its forgotten markers' (0 if none)."""
    fd = dirs.name_dir(name)
    if fd is None:
        return 0
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    found = [int(match[1]) for pattern in (VERSION_FILE, FORGOTTEN_FILE) for match in map(pattern.fullmatch, names)
             if match]
    return max(found, default=0)


def _gone(ref: ArtifactRef, where: str) -> LookupError:
    return LookupError(f"{ref.name!r} version {ref.version} vanished from {where} (forgotten meanwhile)")


@contextlib.contextmanager
def held(dirs: StoreDirs, ref: ArtifactRef) -> Iterator[None]:
    """A download's hold on ``ref``: its manifest file open with a shared ``flock`` for the block."""
    name_fd = dirs.name_dir(ref.name)
    if name_fd is None:
        raise _gone(ref, dirs.layout.root)
    try:
        fd = os.open(f"{ref.version}.{ref.digest}.json", os.O_RDONLY | _MANIFEST_FLAGS, dir_fd=name_fd)
    except FileNotFoundError:
        raise _gone(ref, dirs.layout.root) from None
    finally:
        os.close(name_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a forget holds it exclusively only for its unlink: a short wait
        if os.fstat(fd).st_nlink == 0:
            raise _gone(ref, dirs.layout.root)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def forgetting(dirs: StoreDirs, names: Collection[str]) -> Iterator[LocalForgetter]:
    """The name locks of ``names``, taken in sorted order (two forgets of overlapping names never deadlock; a
    publisher holds at most one), for a forget's listing and removal."""
    with contextlib.ExitStack() as stack:
        for name in sorted(set(names)):
            stack.enter_context(name_lock(dirs.locks, name, where=dirs.layout.locks_dir))
        yield LocalForgetter(dirs)


class LocalForgetter:
    """Removes versions of a local store under the name locks :func:`forgetting` holds."""

    def __init__(self, dirs: StoreDirs) -> None:
        self.dirs = dirs

    def remove(self, refs: Sequence[ArtifactRef]) -> None:
        dirs = self.dirs
        opened: list[int] = []  # every fd this opened, closed at the end (which releases the locks)
        name_fds: list[int] = []
        try:
            busy = []
            for ref in refs:
                name_fd = dirs.name_dir(ref.name)
                if name_fd is None:
                    raise _gone(ref, dirs.layout.root)
                opened.append(name_fd)
                name_fds.append(name_fd)
                try:
                    opened.append(fd := _open_manifest(name_fd, ref))
                except FileNotFoundError:
                    raise _gone(ref, dirs.layout.root) from None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    busy.append(str(ref))
            if busy:
                raise VersionInUseError(f"forget removed nothing: a running download holds {', '.join(busy)}; "
                                        "run it again once the download is over", versions=busy)
            _mark_newest(dirs, refs)
            for ref, name_fd in zip(refs, name_fds, strict=True):  # each version goes in one unlink, held by us
                os.unlink(f"{ref.version}.{ref.digest}.json", dir_fd=name_fd)
            for name_fd in name_fds:
                fsync_fd_dir(name_fd)
        finally:
            for fd in opened:
                os.close(fd)


def _open_manifest(name_fd: int, ref: ArtifactRef) -> int:
    # Read-write where we may: over NFS flock is a whole-file fcntl lock, whose exclusive kind needs a writable fd.
    try:
        return os.open(f"{ref.version}.{ref.digest}.json", os.O_RDWR | _MANIFEST_FLAGS, dir_fd=name_fd)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
    return os.open(f"{ref.version}.{ref.digest}.json", os.O_RDONLY | _MANIFEST_FLAGS, dir_fd=name_fd)


def _mark_newest(dirs: StoreDirs, refs: Sequence[ArtifactRef]) -> None:
    """Before any unlink: for each name whose newest version goes, the marker ``<newest>.forgotten`` (durable)."""
    for name in sorted({ref.name for ref in refs}):
        gone = max(ref.version for ref in refs if ref.name == name)
        if gone < max((version for version, _ in dirs.versions(name)), default=0):
            continue  # a newer version stays: publishers count from it
        fd = dirs.name_dir(name)
        if fd is None:
            continue
        try:
            os.close(os.open(f"{gone}.forgotten", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=fd))
            fsync_fd_dir(fd)
        finally:
            os.close(fd)

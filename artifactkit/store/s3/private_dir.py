"""The private blob directory an S3 download keeps beside DEST, used only through its own fd.

DEST's parent may be writable by others (a shared work dir, ``/tmp`` without the sticky bit, a CI
cache). Whoever can write it can rename our directory away and put a symlink in its place at any
moment; a download that then opened ``parent/dir/<sha>`` by path — as root — wrote every fetched
blob into the link's target (``/etc/cron.d`` in the trial that found it). So the directory is:

* made with ``mkdirat(parent_fd, PREFIX + 16 hex, 0700)`` and opened ``O_DIRECTORY | O_NOFOLLOW``
  at once; the opened inode must be the one at that name (``lstat`` via the parent fd), a directory
  of ours (euid), empty, and not flocked by anyone else — or it is :class:`UnsafeStoreError`;
* flocked for its whole life (:func:`artifactkit.store.locks.hold`), so a later download
  into the same parent can tell an abandoned one (its owner was SIGKILLed) from a live one;
* written only with ``openat(fd, sha)``: wherever the directory has been moved, the bytes land in
  our inode, never through a name someone else controls;
* emptied through its fd (we put only flat blob files there) and then ``rmdir``-ed by name only
  while the name is still our inode: a swapped-in object is neither followed nor removed, and the
  swap is reported. ``rmdir`` removes only an empty directory, so even a swap in the last instant
  can cost nobody more than an empty directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Final

from artifactkit.errors import UnsafeStoreError
from artifactkit.store.locks import hold, hold_if_free

PREFIX: Final = ".artifactkit-s3-blobs-"
_SUFFIX_LEN: Final = 16  # os.urandom(8).hex(): 64 random bits, not guessable before the mkdir
_HEX: Final = "0123456789abcdef"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A concurrent sweep (below) removes a dir made between our mkdir and our flock: make another, a few times.
_CREATE_ATTEMPTS: Final = 4


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _empty_through(fd: int) -> None:
    """Unlink every non-directory entry of the directory ``fd`` (our blob files), by name relative to it."""
    for name in os.listdir(fd):
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)


class BlobDir:
    """A private directory beside a download's destination; :meth:`close` removes what it made."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        self.parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sweep_abandoned(self.parent_fd)
            self.name, self.fd = self._create()
        except BaseException:
            os.close(self.parent_fd)
            raise
        self.identity = _identity(os.fstat(self.fd))

    @property
    def where(self) -> str:
        return os.path.join(self.parent, self.name)

    def _create(self) -> tuple[str, int]:
        for _ in range(_CREATE_ATTEMPTS):
            name = PREFIX + os.urandom(_SUFFIX_LEN // 2).hex()
            os.mkdir(name, 0o700, dir_fd=self.parent_fd)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.parent_fd)
            except OSError as err:  # ELOOP/ENOTDIR: swapped for a link or file before we opened it
                why = f"it was replaced before it could be opened ({err.strerror})"
                raise UnsafeStoreError(f"download refused: the private directory {os.path.join(self.parent, name)} "
                                       f"{why}; nothing was written", path=os.path.join(self.parent, name),
                                       why=why) from err
            try:
                if self._adopt(name, fd):
                    return name, fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        raise FileExistsError(errno.EEXIST, "private blob directories were removed as fast as they were made "
                              "(another download sweeping this directory?)", self.parent)

    def _adopt(self, name: str, fd: int) -> bool:
        """Lock the opened dir and prove it is the one we made; False if a concurrent sweep removed it."""
        where = os.path.join(self.parent, name)
        # Blocking: a concurrent sweep holds it only while removing it; a live download's directory
        # moved in by someone is waited for, and then is empty (or gone) like any other of ours.
        hold(fd)
        held = os.fstat(fd)
        if held.st_nlink == 0:
            return False  # swept by a concurrent download between our mkdir and our flock: it was empty
        problem = ""
        if held.st_uid != os.geteuid() or stat.S_IMODE(held.st_mode) & 0o077:
            problem = f"it is owned by uid {held.st_uid} with mode {stat.S_IMODE(held.st_mode):o}, not ours"
        elif os.listdir(fd):
            problem = "it is not empty"
        elif not self._still_ours(name, held):
            problem = "another object took its name"
        if problem:
            raise UnsafeStoreError(f"download refused: the private directory {where} was swapped: {problem}; "
                                   "nothing was written", path=where, why=problem)
        return True

    def _still_ours(self, name: str, held: os.stat_result | None = None) -> bool:
        try:
            now = os.lstat(name, dir_fd=self.parent_fd)
        except FileNotFoundError:
            return False
        return _identity(now) == (_identity(held) if held is not None else self.identity)

    def read_path(self) -> str:
        """A path to read the blobs by, for :func:`~artifactkit.store.download.restore_tree`.

        ``/proc/<pid>/fd/<fd>`` names our inode itself (in this process and in its same-user worker
        children), so a rename of the directory changes nothing. Where ``/proc`` is absent the
        directory's name is used: those reads are digest-verified, so a swapped directory can only
        yield the correct bytes or an ``IntegrityError``, never a write outside.
        """
        proc = f"/proc/{os.getpid()}/fd/{self.fd}"
        with contextlib.suppress(OSError):
            if _identity(os.stat(proc)) == self.identity:
                return proc
        return self.where

    def check(self) -> None:
        """:class:`UnsafeStoreError` unless our directory still has its name (nobody moved it)."""
        if not self._still_ours(self.name):
            why = "someone else renamed it or put another object under its name"
            raise UnsafeStoreError(f"download refused: the private directory {self.where} was swapped while "
                                   f"blobs were fetched ({why}); every blob went through its fd, nothing outside "
                                   "it was written", path=self.where, why=why)

    def close(self) -> bool:
        """Remove what we made, through our fds; True if our name was swapped meanwhile (then the
        foreign object is left alone, and our directory, wherever it was moved, is left empty)."""
        swapped = False
        try:
            _empty_through(self.fd)
            swapped = not self._still_ours(self.name)
            if not swapped:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(self.name, dir_fd=self.parent_fd)
        finally:
            os.close(self.fd)  # releases the flock: only now may a sweep take what is left
            os.close(self.parent_fd)
        return swapped


def sweep_abandoned(parent_fd: int) -> list[str]:
    """Remove private blob dirs of SIGKILLed downloads in this parent; the names removed.

    Only exact ``PREFIX<16 hex>`` names, real directories (opened ``O_NOFOLLOW``) of our euid whose
    flock is free (a live download holds its own until it has emptied it), emptied through their fd
    and ``rmdir``-ed while the name is still that inode. Anything else is left alone, silently: it is
    not this download's business.
    """
    removed = []
    for name in os.listdir(parent_fd):
        suffix = name[len(PREFIX):]
        if not name.startswith(PREFIX) or len(suffix) != _SUFFIX_LEN or suffix.strip(_HEX):
            continue
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            continue  # a symlink, a file, or gone: not ours to touch
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or not hold_if_free(fd):
                continue
            _empty_through(fd)
            if _identity(os.lstat(name, dir_fd=parent_fd)) == _identity(st):
                os.rmdir(name, dir_fd=parent_fd)
                removed.append(name)
        except OSError:
            continue  # swapped, refilled or not removable: leave it
        finally:
            os.close(fd)
    return removed

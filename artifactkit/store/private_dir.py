"""A private directory beside a download's destination, used only through its own fd.

DEST's parent may be writable by others (a shared work dir, ``/tmp`` without the sticky bit, a CI
cache). Whoever can write it can rename our directory away and put a symlink in its place at any
moment; a download that then used ``parent/dir/...`` by path — as root — wrote every fetched blob
into the link's target (``/etc/cron.d`` in the trial that found it), and a local download renamed
an attacker's link into DEST while saying "verified exact". So the directory is:

* made with ``mkdirat(parent_fd, PREFIX + hex, 0700)`` and opened ``O_DIRECTORY | O_NOFOLLOW`` at
  once; the opened inode must be the one at that name (``lstat`` via the parent fd), a directory of
  ours (euid), private, empty, and not flocked by anyone else — or it is :class:`UnsafeStoreError`;
  a directory of ours whose mode lets others in is no swap (only we or root can make one of our euid):
  s3fs and rclone mount ignore ``mkdir``'s mode. It is ``chmod``-ed 0700, or, where the filesystem does
  not apply that either, removed and refused as the filesystem's (:class:`NotRestorableError`). Likewise one
  owned by another uid where a file we create beside it (``O_EXCL``, checked through its fd) shows that uid too:
  rclone mount ``--uid`` and bindfs ``--force-user`` show every entry so; a swapped-in directory leaves ours ours;
* flocked for its whole life (:func:`artifactkit.store.locks.hold`), so a later download into the
  same parent can tell an abandoned one (its owner was SIGKILLed) from a live one;
* marked as ours: once locked and proven empty it gets a file :data:`MARKER` (created through its fd,
  ``O_EXCL | O_NOFOLLOW``) holding HMAC-SHA256, under the user's own key
  (:func:`~artifactkit.store.user_cache.private_dir_key`), of its ``st_dev``, ``st_ino`` and name;
* used only through its fd: wherever the directory has been moved, what we write lands in our
  inode, and what we rename out of it (a download's finished tree) is ours;
* emptied through its fd (nobody else can change what is inside: 0700, ours) and then ``rmdir``-ed
  by name only while the name is still our inode: a swapped-in object is neither followed nor
  removed. ``rmdir`` removes only an empty directory, so even a swap in the last instant can cost
  nobody more than an empty directory.

The local download keeps its tree in one (prefix ``.NAME.artifactkit-``), the bucket download its
fetched blobs (prefix ``.artifactkit-s3-blobs-``).

**Nothing is removed because of its name.** Whoever can rename entries in the parent can give any directory
there, a victim's results included, the exact name of an abandoned one; the sweep used to empty it. Now the
sweep (:func:`sweep_abandoned`) removes a directory only if this user's key proves that a download made that
very inode under that very name: a victim's directory has no marker, and a marker copied or moved into one
(or a leftover renamed) names another inode or another name. The key lives in the user's own cache directory,
which nobody else can write; a sweep without a usable key removes nothing. What this cannot sweep is left for
the user, never guessed at: a download killed between its ``mkdir`` and its marker (an empty directory), one
whose maker had no usable key, and after a power cut one whose marker (or the key itself) had not reached the
disk: neither is flushed, a SIGKILL needs no flush.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import stat
from collections.abc import Callable
from typing import Final

from artifactkit._fsutil import listdir_fresh, remove_tree
from artifactkit._mounts import mount_info
from artifactkit.errors import NotRestorableError, UnsafeStoreError
from artifactkit.store.cleanup import cleaning_up
from artifactkit.store.locks import hold, hold_if_free
from artifactkit.store.user_cache import private_dir_key

_HEX: Final = "0123456789abcdef"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A sweep by an older artifactkit (which went by name) may remove a dir made between our mkdir and our flock:
#: make another, a few times. Ours never does: a dir without its marker is never removed.
_CREATE_ATTEMPTS: Final = 4
#: The file in a private directory that proves who made it; no download puts a name starting with "." there
#: (a tree is ``tree``, blobs are named by their 64 hex digits).
MARKER: Final = ".artifactkit-made-here"
#: What the MAC is taken over, before the device, inode and name (a new layout gets a new tag).
_MAC_TAG: Final = b"artifactkit.private-dir/1"
#: The marker's length: the hex MAC.
_MARKER_BYTES: Final = 2 * hashlib.sha256().digest_size


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _mac(key: bytes, st: os.stat_result, name: str) -> bytes:
    """The marker of the directory ``st`` named ``name``: bound to the inode (a marker copied or moved into another
    directory names the wrong one) and to the name (an inode number reused later comes with another random name)."""
    message = b"\0".join((_MAC_TAG, f"{st.st_dev}:{st.st_ino}".encode(), os.fsencode(name)))
    return hmac.digest(key, message, "sha256").hex().encode("ascii")


def _proven(fd: int, st: os.stat_result, name: str, key: bytes) -> bool:
    """Whether the directory ``fd`` (``st``, found as ``name``) holds the marker this key makes for it: a regular
    file of ours opened through the directory's fd, not followed, read no further than a marker's length."""
    try:
        marker = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    try:
        found = os.fstat(marker)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
            return False
        claimed = os.read(marker, _MARKER_BYTES + 1)
    except OSError:
        return False
    finally:
        os.close(marker)
    return hmac.compare_digest(claimed, _mac(key, st, name))


def _mark(fd: int, st: os.stat_result, name: str, key: bytes) -> None:
    marker = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        if os.write(marker, _mac(key, st, name)) != _MARKER_BYTES:
            raise OSError(errno.EIO, "short write of the private directory's marker")
    finally:
        os.close(marker)


def _remove(parent_fd: int, name: str, fd: int, key: bytes | None) -> bool:
    """``rmdir`` the emptied directory ``fd`` at ``name`` (still its inode: the caller checked), its marker
    removed just before; if the ``rmdir`` fails (something inside could not be removed: an immutable file, say)
    the marker comes back, so that what stays is still provably ours for a later sweep."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(MARKER, dir_fd=fd)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        if key is not None:
            with contextlib.suppress(OSError):
                _mark(fd, os.fstat(fd), name, key)
        return False
    return True


def _empty_through(fd: int, stop: Callable[[], bool] | None = None) -> bool:
    """Remove everything in the directory ``fd`` but its marker, by name relative to it (restoring owner rwx on
    directories whose restored mode locks their owner out); False if ``stop()`` said to stop first. Listed afresh:
    the fd was listed once, empty, when adopted. The marker goes last, just before the ``rmdir``: a kill, or a
    stop, while emptying leaves it provably ours (the next sweep finishes it)."""
    for name in listdir_fresh(fd):
        if name == MARKER:
            continue
        if stop is not None and stop():
            return False
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                if not remove_tree(name, dir_fd=fd, ignore_errors=True, stop=stop):
                    return False
            else:
                os.unlink(name, dir_fd=fd)
    return True


class PrivateDir:
    """A private directory in ``parent`` named ``prefix`` + ``hex_digits`` random hex digits, marked as ours;
    :meth:`close` removes what it made. Abandoned ones of the same prefix that carry our marker are swept first
    (:func:`sweep_abandoned`)."""

    def __init__(self, parent: str, prefix: str, *, hex_digits: int = 12) -> None:
        self.parent, self.prefix, self.hex_digits = parent, prefix, hex_digits
        self.key = private_dir_key()
        self.parent_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if self.key is not None:
                sweep_abandoned(self.parent_fd, prefix, hex_digits, self.key)
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
            name = self.prefix + os.urandom(self.hex_digits // 2).hex()
            os.mkdir(name, 0o700, dir_fd=self.parent_fd)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.parent_fd)
            except OSError as err:  # ELOOP/ENOTDIR: swapped for a link or file before we opened it
                where = os.path.join(self.parent, name)
                why = f"it was replaced before it could be opened ({err.strerror})"
                raise UnsafeStoreError(f"download refused: the private directory {where} {why}; nothing was "
                                       "written", path=where, why=why) from err
            try:
                if self._adopt(name, fd):
                    return name, fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        raise FileExistsError(errno.EEXIST, "private directories were removed as fast as they were made "
                              "(another download sweeping this directory?)", self.parent)

    def _adopt(self, name: str, fd: int) -> bool:
        """Lock the opened dir and prove it is the one we made; False if a concurrent sweep removed it."""
        where = os.path.join(self.parent, name)
        # Blocking: a sweep holds it only while removing it; a live download's directory moved in by someone is
        # waited for, and then is empty (or gone) like any other of ours.
        hold(fd)
        held = os.fstat(fd)
        if held.st_nlink == 0:
            return False  # removed between our mkdir and our flock (an older artifactkit's sweep): it was empty
        problem = ""
        if held.st_uid != os.geteuid():
            if self._owner_of_a_new_file() == held.st_uid:
                raise self._refused(name, fd, held, what="our owner", remedy="keeps owners",
                                    seen=f"it and a file made beside it read uid {held.st_uid}, not {os.geteuid()}")
            problem = f"it is owned by uid {held.st_uid} with mode {stat.S_IMODE(held.st_mode):o}, not ours"
        elif os.listdir(fd):
            problem = "it is not empty"
        elif not self._still_ours(name, held):
            problem = "another object took its name"
        if problem:
            raise UnsafeStoreError(f"download refused: the private directory {where} was swapped: {problem}; "
                                   "nothing was written", path=where, why=problem)
        if stat.S_IMODE(held.st_mode) & 0o077:
            held = self._made_private(name, fd, held)
        if self.key is not None:  # locked, ours, empty and at its name: now, and only now, provably ours
            # Unmarked on a full disk (the download then fails as full, and close() removes the directory);
            # only a kill before close() would leave it, unprovable, for the user.
            with contextlib.suppress(OSError):
                _mark(fd, held, name, self.key)
        return True

    def _made_private(self, name: str, fd: int, held: os.stat_result) -> os.stat_result:
        """Our euid's directory, at our name, whose mode lets others in: ``chmod`` it 0700 and go on, or refuse
        naming the filesystem, whose ``mkdir`` and ``chmod`` do not apply the mode (s3fs, rclone mount), and
        remove the directory.

        Not a swap: only this euid (or root) can have made a directory of this euid, and once it is 0700, locked,
        empty and at our name it is as private as the one we made, whoever made it.
        """
        why = ""
        try:
            os.fchmod(fd, 0o700)
            held = os.fstat(fd)
        except OSError as err:
            why = f", and chmod answered {errno.errorcode.get(err.errno or 0, err.errno)}"
        if stat.S_IMODE(held.st_mode) == 0o700:
            return held
        raise self._refused(name, fd, held, what="mode 0700", remedy="keeps modes",
                            seen=f"it reads {stat.S_IMODE(held.st_mode):o} after mkdir{why}")

    def _owner_of_a_new_file(self) -> int | None:
        """The owner this filesystem shows on a file just made in the parent (``O_EXCL``: no name is trusted, no
        swap can come between its creation and our ``fstat``); removed again. None if none can be made.

        A filesystem that forces an owner on what it shows (rclone mount ``--uid``, bindfs ``--force-user``)
        shows it on this file too; under a swap the file, made by us, is ours."""
        name = f"{self.prefix}owner-{os.urandom(6).hex()}"
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self.parent_fd)
        except OSError:
            return None
        try:
            made = os.fstat(fd)
            with contextlib.suppress(OSError):
                if _identity(os.lstat(name, dir_fd=self.parent_fd)) == _identity(made):
                    os.unlink(name, dir_fd=self.parent_fd)
            return made.st_uid
        finally:
            os.close(fd)

    def _refused(self, name: str, fd: int, held: os.stat_result, *, what: str, seen: str,
                 remedy: str) -> NotRestorableError:
        """Remove our directory (empty, still at our name); the refusal naming the filesystem, which does not
        apply ``what`` to it (``seen``: what it shows instead): not a swap, and nothing is left behind."""
        where = os.path.join(self.parent, name)
        with contextlib.suppress(OSError):
            if not os.listdir(fd) and self._still_ours(name, held):
                os.rmdir(name, dir_fd=self.parent_fd)
        try:
            fs_type = mount_info(where if os.path.lexists(where) else self.parent or ".").fs_type
        except OSError:
            fs_type = "unknown"
        return NotRestorableError(
            f"download refused: this filesystem ({fs_type}) does not apply {what} to the private directory "
            f"{where} ({seen}), so the tree could not be built where only this user can reach it; nothing was "
            f"written: download onto a filesystem that {remedy}", entries=[where])

    def _still_ours(self, name: str, held: os.stat_result | None = None) -> bool:
        try:
            now = os.lstat(name, dir_fd=self.parent_fd)
        except FileNotFoundError:
            return False
        return _identity(now) == (_identity(held) if held is not None else self.identity)

    def read_path(self) -> str:
        """A path to read what is inside by (``restore_tree``'s blobs, where a reader takes a path).

        ``/proc/<pid>/fd/<fd>`` names our inode itself, so a rename of the directory changes nothing.
        Where ``/proc`` is absent the directory's name is used: those reads are digest- or identity-checked,
        so a swapped directory can only fail the download, never cause a write outside.
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
            raise UnsafeStoreError(f"download refused: the private directory {self.where} was swapped meanwhile "
                                   f"({why}); everything went through its fd, nothing outside it was written",
                                   path=self.where, why=why)

    def close(self) -> bool:
        """Remove what we made, through our fds; True if our name was swapped meanwhile (then the
        foreign object is left alone, and our directory, wherever it was moved, is left empty). A cleanup an
        interrupt cut short (:mod:`~artifactkit.store.cleanup`) leaves the directory marked, for the next sweep."""
        swapped = False
        try:
            with cleaning_up() as over:  # bounded once Ctrl-C is part of it: the next sweep takes the rest
                if not _empty_through(self.fd, over):
                    return False
            swapped = not self._still_ours(self.name)
            if swapped:  # our inode, moved away by someone, is left empty: unmarked, nothing to prove
                with contextlib.suppress(OSError):
                    os.unlink(MARKER, dir_fd=self.fd)
            else:
                # Never in place of the error that stopped the download: what is left is unlocked once we close,
                # marked, and the next download to this parent sweeps it.
                with contextlib.suppress(OSError):
                    _remove(self.parent_fd, self.name, self.fd, self.key)
        finally:
            os.close(self.fd)  # releases the flock: only now may a sweep take what is left
            os.close(self.parent_fd)
        return swapped


def sweep_abandoned(parent_fd: int, prefix: str, hex_digits: int, key: bytes) -> list[str]:
    """Remove private dirs of SIGKILLed downloads (``prefix`` + ``hex_digits`` hex) in this parent; the names removed.

    Only exact names, real directories (opened ``O_NOFOLLOW``) of our euid closed to others, holding the marker
    ``key`` makes for that inode and name (:func:`_proven`), whose flock is free (a live download holds its own
    until it has emptied it); emptied through their fd and ``rmdir``-ed while the name is still that inode.
    Anything else is left alone, silently: the name alone proves nothing, and it is not this download's business.
    """
    removed = []
    for name in os.listdir(parent_fd):
        suffix = name[len(prefix):]
        if not name.startswith(prefix) or len(suffix) != hex_digits or suffix.strip(_HEX):
            continue
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            continue  # a symlink, a file, or gone: not ours to touch
        try:
            st = os.fstat(fd)
            if (st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077 or not _proven(fd, st, name, key)
                    or not hold_if_free(fd)):
                continue
            _empty_through(fd)
            if _identity(os.lstat(name, dir_fd=parent_fd)) == _identity(st) and _remove(parent_fd, name, fd, key):
                removed.append(name)
        except OSError:
            continue  # swapped, refilled or not removable: leave it
        finally:
            os.close(fd)
    return removed

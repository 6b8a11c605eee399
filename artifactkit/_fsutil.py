"""Filesystem chores every layer needs, kept once: removing a tree whose modes lock its owner out, or that is
deeper than a path or the interpreter's stack reaches, and naming the path an fd's failure was about."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from artifactkit.errors import ArtifactkitError

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Directories :func:`remove_tree` holds open on its way down, at most. One deeper is moved up into the top
#: directory (a rename within the tree being removed) and emptied from there: a chain 2,048 levels deep (the
#: deepest a download makes) held open whole would be past a user's default limit of 1,024 fds.
_HELD: Final = 32
#: What a call through the fd's ``/proc`` link names (a FIFO's or a symlink's xattrs are set that way).
_PROC_FD: Final = "/proc/self/fd/"
T = TypeVar("T")
#: One directory's listing: each name, and whether it is a directory (not a link to one).
Listing = list[tuple[str, bool]]


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None, ignore_errors: bool = False,
                stop: Callable[[], bool] | None = None) -> bool:
    """Remove the directory tree at ``path`` (relative to ``dir_fd`` if given); absent is fine. True once it is
    gone; False if ``stop()`` said to stop first (asked before each entry: a cleanup's time bound,
    :mod:`artifactkit.store.cleanup`), and then what is left is still a tree under ``path``.

    Any depth, with no recursion and at most :data:`_HELD` directories open (``shutil.rmtree`` recurses: a
    tree 1,200 levels deep was a ``RecursionError``, and was left behind). Every directory is opened
    ``O_NOFOLLOW`` from its parent's fd and emptied through it, so no link is followed. A restored or
    corpus tree may hold directories with mode ``0o555`` or ``0o000``; without root their owner cannot
    list or empty them, so a directory that refuses gets owner ``rwx`` back (``fchmod``, or ``fchmodat``
    that follows no link) and is tried once more. ``ignore_errors``: what cannot be removed is left, the
    rest removed.
    """
    name = os.fspath(path)
    top = _attempt(_open_dir, name, dir_fd, ignore_errors=ignore_errors)
    if top is None:
        return True
    try:
        if not _empty(top, ignore_errors, stop):
            return False
    finally:
        os.close(top)
    _attempt(_rmdir, name, dir_fd, ignore_errors=ignore_errors)
    return True


def _empty(top: int, ignore_errors: bool, stop: Callable[[], bool] | None = None) -> bool:
    """Remove everything inside the directory ``top``, depth first, holding an fd per level down to
    :data:`_HELD` levels and moving a directory any deeper up into ``top``, to be emptied from there; False if
    ``stop()`` said to stop first."""
    spill_names = (f".artifactkit-removing-{n}" for n in itertools.count())
    # Each level: its fd, its name in the level above, and what is left of its listing.
    stack: list[tuple[int, str, Listing]] = []
    spilled = True  # the top is still to be listed
    try:
        while stack or spilled:
            if not stack:  # the top, listed again after something was moved up into it
                spilled = False
                stack.append((top, "", _unlocking(top, _listing)))
            if stop is not None and stop():
                return False
            fd, name, left = stack[-1]
            if not left:
                stack.pop()
                if stack:
                    os.close(fd)
                    _attempt(_unlocking, stack[-1][0], os.rmdir, name, ignore_errors=ignore_errors)
                continue
            entry, is_dir = left.pop()
            if not is_dir:
                _attempt(_unlocking, fd, os.unlink, entry, ignore_errors=ignore_errors)
            elif len(stack) < _HELD:
                below = _attempt(_open_dir, entry, fd, ignore_errors=ignore_errors)
                if below is not None:
                    stack.append((below, entry, []))  # in the stack first: closed whatever happens next
                    stack[-1][2].extend(_attempt(_unlocking, below, _listing, ignore_errors=ignore_errors) or [])
            else:
                spill = next(spill for spill in spill_names if not _exists(spill, top))
                spilled = bool(_attempt(_move_up, entry, fd, spill, top, ignore_errors=ignore_errors)) or spilled
        return True
    finally:
        for fd, _, _ in stack:
            if fd != top:
                os.close(fd)


def _listing(*, dir_fd: int) -> Listing:
    """The entries of the directory ``dir_fd``, listed through a new open of it (:func:`listdir_fresh` says why)."""
    fresh = os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fresh) as entries:
            return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    finally:
        os.close(fresh)


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        _unlock(name, dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _unlock(name: str, dir_fd: int | None) -> None:
    """Owner ``rwx`` for the directory ``name``, never through a link (``fchmodat`` refuses one: ``ValueError``)."""
    try:
        os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
    except ValueError as err:
        raise NotADirectoryError(errno.ENOTDIR, "it became a symlink while its tree was removed", name) from err


def _unlocking(fd: int, call: Callable[..., T], *args: Any) -> T:
    """``call(*args, dir_fd=fd)``: a change inside the directory ``fd``, tried once more after giving it owner
    ``rwx`` if its mode refused."""
    try:
        return call(*args, dir_fd=fd)
    except PermissionError:
        os.fchmod(fd, 0o700)
        return call(*args, dir_fd=fd)


def _move_up(name: str, fd: int, spill: str, top: int) -> bool:
    """Rename the directory ``name`` in ``fd`` to ``spill`` in ``top``. That changes its ``..``, which takes
    write permission on it as well as on ``fd``."""
    try:
        os.rename(name, spill, src_dir_fd=fd, dst_dir_fd=top)
    except PermissionError:
        os.fchmod(fd, 0o700)
        _unlock(name, fd)
        os.rename(name, spill, src_dir_fd=fd, dst_dir_fd=top)
    return True


def _rmdir(path: str, dir_fd: int | None) -> None:
    os.rmdir(path, dir_fd=dir_fd)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _attempt(call: Callable[..., T], *args: Any, ignore_errors: bool) -> T | None:
    """``call(*args)``; what vanished meanwhile is gone already, any other failure raised unless ``ignore_errors``."""
    try:
        return call(*args)
    except FileNotFoundError:
        return None
    except OSError:
        if ignore_errors:
            return None
        raise


def listdir_fresh(dir_fd: int) -> list[str]:
    """The names in the directory ``dir_fd``, listed through a new open of it.

    A second ``listdir`` of one open directory can miss what was created after the first: on btrfs (Linux
    6.18) ``listdir(fd)``, ``mkdir(x, dir_fd=fd)``, ``listdir(fd)`` gave ``[]`` twice, and ``['x']`` only on a
    third call (the rewind that ends a listing refreshes it). A fresh open of ``"."`` sees the directory now.
    """
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Re-raise an ``OSError`` of a call on an fd as the same error (errno and class kept) naming ``path``.

    ``os.setxattr(fd, ...)`` names the fd's number, a call through ``/proc/self/fd/N/name`` that path, and
    ``os.fchown``/``os.fchmod``/``os.fstat`` nothing at all: a forged capability in a manifest failed a
    download with ``fd 12: Invalid argument``, which says neither which entry nor where. An error that
    names a path of its own, and one of ours, passes as it is.
    """
    try:
        yield
    except OSError as err:
        name = err.filename
        anonymous = name is None or isinstance(name, int) or os.fsdecode(name).startswith(_PROC_FD)
        if not anonymous or err.errno is None or isinstance(err, ArtifactkitError):
            raise
        raise OSError(err.errno, err.strerror, path) from err

"""Filesystem chores every layer needs, kept once: removing a tree whose modes lock its owner out, and naming
the path an fd's failure was about."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from typing import Final

from artifactkit.errors import ArtifactkitError

#: What a call through the fd's ``/proc`` link names (a FIFO's or a symlink's xattrs are set that way).
_PROC_FD: Final = "/proc/self/fd/"


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None, ignore_errors: bool = False) -> None:
    """Remove the directory tree at ``path`` (relative to ``dir_fd`` if given); absent is fine.

    A restored or corpus tree may hold directories with mode ``0o555`` or ``0o000``; without root
    ``rmtree`` cannot empty them, so on ``PermissionError`` every directory gets owner ``rwx`` back
    (through ``fwalk``: no link is followed) and the removal runs again.
    """
    with contextlib.suppress(FileNotFoundError):
        try:
            shutil.rmtree(path, dir_fd=dir_fd)
        except PermissionError:
            os.chmod(path, 0o700, dir_fd=dir_fd, follow_symlinks=False)
            for _top, subdirs, _files, top_fd in os.fwalk(path, dir_fd=dir_fd):
                for sub in subdirs:
                    if stat.S_ISDIR(os.lstat(sub, dir_fd=top_fd).st_mode):
                        os.chmod(sub, 0o700, dir_fd=top_fd)
            shutil.rmtree(path, dir_fd=dir_fd, ignore_errors=ignore_errors)
        except OSError:
            if not ignore_errors:
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

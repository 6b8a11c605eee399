"""Filesystem chores every layer needs, kept once: removing a tree whose modes lock its owner out."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat


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

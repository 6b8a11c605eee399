"""Filesystem chores every layer needs, kept once: removing a tree whose modes lock its owner out."""

from __future__ import annotations

import contextlib
import os
import stat


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None, ignore_errors: bool = False) -> None:
    """Remove the directory tree at ``path`` (relative to ``dir_fd`` if given); absent is fine.

    A restored or corpus tree may hold directories with mode ``0o555`` or ``0o000``; without root
    ``rmtree`` cannot empty them, so on ``PermissionError`` every directory gets owner ``rwx`` back
    (through ``fwalk``: no link is followed) and the removal runs again.
    """
    import shutil  # noqa: PLC0415 - a download worker imports this module and never removes a tree
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

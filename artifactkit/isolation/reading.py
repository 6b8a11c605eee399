"""Read like an ordinary program: the one copy of "what a later consumer does to a tree".

No ``O_NOATIME`` anywhere: on an unprotected tree these reads move atime, which is the point
(the probe measures it, the competing readers cause it, conformance's ``survives_read`` checks
that a copy stands it). ``O_NONBLOCK``: a FIFO in a hostile tree must not hang a reader.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from typing import Final

#: How much of each file one read takes: enough to be a real read, cheap for big files.
READ_BYTES: Final = 65536

#: Entries that vanish or change kind while a tree is walked, or that the reader may not open.
SKIPPED: Final = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def read_file(path: str, *, nbytes: int = READ_BYTES, follow: bool = True, dir_fd: int | None = None) -> int:
    """Open ``path`` and read up to ``nbytes`` once, as any program would; return the bytes read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        return len(os.read(fd, nbytes))
    finally:
        os.close(fd)


def read_tree(root: str, *, stop: Callable[[], bool] = lambda: False,
              on_read: Callable[[], None] = lambda: None) -> bool:
    """One ordinary pass over ``root``: directories listed, files read, links read with ``readlink``.

    Entries in :data:`SKIPPED` are passed over (a refused open moves nothing). ``on_read`` is called
    after each read; the pass ends early once ``stop()`` is true. Returns whether anything was read.
    """
    did_read = False
    # os.walk lists directories normally: that moves their atime too, as any reader's would.
    for dirpath, dirs, files in os.walk(root):
        # Links to directories are listed among dirs (not followed): read those links too.
        for name in [*(d for d in dirs if os.path.islink(os.path.join(dirpath, d))), *files]:
            if stop():
                return True
            path = os.path.join(dirpath, name)
            with contextlib.suppress(*SKIPPED):
                # One lstat, as islink took: FIFOs and device nodes are not read, as ``grep -r`` reads
                # none (a device may be a disk; a FIFO only waits), so they are walked past like sockets.
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    os.readlink(path)
                elif stat.S_ISREG(mode):
                    read_file(path)
                else:
                    continue
                on_read()
                did_read = True
    return did_read

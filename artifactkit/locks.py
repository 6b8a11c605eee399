"""Inter-process locks with ``fcntl.flock``: safe across threads and ``spawn`` processes.

flock locks belong to an open file description, so two opens in one process exclude each
other just like two processes do (POSIX ``fcntl`` record locks would not, within a process).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator


@contextlib.contextmanager
def flocked(path: str, *, exclusive: bool) -> Iterator[None]:
    """Hold a shared or exclusive flock on ``path`` (created if needed) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the last fd of the description releases the lock

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


@contextlib.contextmanager
def store_lock(locks_dir: str, *, exclusive: bool) -> Iterator[None]:
    """The store-wide lock: shared for publishers, exclusive for gc, behind a turnstile.

    flock does not queue a waiting writer ahead of new readers, so back-to-back publishers could
    starve gc forever (seen: 32 gc runs against 2,392 publishes in 20 s). Everyone first passes
    ``turnstile.lock`` — publishers only momentarily, gc holding it while it waits for and holds
    the store lock — so once gc is waiting no new publisher starts, and the ones in flight finish.
    """
    turnstile = os.open(os.path.join(locks_dir, "turnstile.lock"),
                        os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not exclusive:
            os.close(turnstile)
            turnstile = -1
        with flocked(os.path.join(locks_dir, "store.lock"), exclusive=exclusive):
            yield
    finally:
        if turnstile >= 0:
            os.close(turnstile)

"""A bound on how long a block may run: a walk that loops or a hash of a claimed size fails instead of hanging."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def deadline(seconds: float, why: str = "") -> Iterator[None]:
    """``TimeoutError`` in this thread after ``seconds`` (``why``: said after it). The native core runs Python's
    signal handlers as it runs Ctrl-C's, so a long call into it is stopped there too."""
    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still working after {seconds} s{why}")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

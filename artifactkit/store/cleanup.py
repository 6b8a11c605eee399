"""Cleaning up after an operation, bounded once Ctrl-C is involved, and never cut short by another Ctrl-C.

A publish removes its staging and a download its hidden directory on the way out. Both were a plain removal in a
``finally``: an interrupted 100,000-file publish spent 1-2 s of its exit removing its staging on a tmpfs (16.5 s on
a disk, issue 53), and a second Ctrl-C raised a ``KeyboardInterrupt`` in the middle of the removal, which then
stopped there (97 k staged files left, a hidden directory of 10-38 k entries). So a cleanup here

* holds SIGINT for its whole length (:func:`cleaning_up`): a Ctrl-C that comes meanwhile is remembered, not raised
  inside it; if the cleanup was not already unwinding an exception, it is raised once the cleanup is done;
* is bounded once an interrupt is part of it (it was caused by one, or one came during it): after
  :data:`CLEANUP_BUDGET_S` it stops where it is. What is left then is what the store's ``gc`` (a publish's staging
  directory) or the next download into the same directory (a download's hidden directory, still marked as ours)
  removes: never a half-visible result, only a leftover of a known name.

The handler can only be changed on the main thread: a cleanup on another thread is not interrupted by Ctrl-C
anyway (Python raises ``KeyboardInterrupt`` on the main thread), so it runs unshielded and unbounded there.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Final

#: How long a cleanup an interrupt is part of may take before it stops and leaves the rest to ``gc`` or the next
#: download, counted from the Ctrl-C where the console script saw it (:func:`note_press`), else from the
#: cleanup's start: the rest of issue 53's 2 s from Ctrl-C to exit is the interpreter's end. Counted from the
#: cleanup's start, the engine's stop came on top (seen: 2.26 s on two cores at load 8).
CLEANUP_BUDGET_S: Final = 1.0

#: When the running command's first Ctrl-C came (``time.monotonic_ns``), if the console script's handler saw it.
_first_press_ns: list[int] = []


def note_press(at_ns: int | None) -> None:
    """Record when the running command's first Ctrl-C came; ``None``: a new command starts, with none yet."""
    _first_press_ns[:] = [] if at_ns is None else [at_ns]


class _Clock:
    """When the cleanup must stop: never, until an interrupt is part of it."""

    def __init__(self, interrupted: bool) -> None:
        self.deadline_ns: int | None = None
        self.presses = 0
        if interrupted:
            self.start()

    def start(self) -> None:
        if self.deadline_ns is None:
            since = min([time.monotonic_ns(), *_first_press_ns])
            self.deadline_ns = since + int(CLEANUP_BUDGET_S * 1e9)

    def pressed(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler while the cleanup runs: remembered, and the budget starts."""
        self.presses += 1
        self.start()

    def over(self) -> bool:
        return self.deadline_ns is not None and time.monotonic_ns() >= self.deadline_ns


def _in_flight() -> BaseException | None:
    """The exception this cleanup is unwinding, if any (in a ``finally`` too: CPython treats it as handled there)."""
    return sys.exc_info()[1]


@contextlib.contextmanager
def cleaning_up(cause: BaseException | None = None) -> Iterator[Callable[[], bool]]:
    """Hold SIGINT for the block and yield ``over()``: True once the cleanup should stop and leave the rest.

    ``cause``: what the cleanup unwinds (default: the exception being handled where this is entered). A
    ``KeyboardInterrupt`` bounds it from the start; a Ctrl-C during the block bounds it from then on, and is
    raised after the block unless ``cause`` is already an exception on its way out.
    """
    cause = cause if cause is not None else _in_flight()
    clock = _Clock(isinstance(cause, KeyboardInterrupt))
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not callable(previous):  # another thread, or SIG_IGN / SIG_DFL: nobody raises here
        yield clock.over
        return
    signal.signal(signal.SIGINT, clock.pressed)
    try:
        yield clock.over
    finally:
        signal.signal(signal.SIGINT, previous)
    if clock.presses and cause is None:
        previous(signal.SIGINT, None)  # as if it came just now: Python's raises KeyboardInterrupt

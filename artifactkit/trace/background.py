"""What the inotify watcher, the fanotify holder and the self-open tracer share, kept once.

:class:`BackgroundLoop` is the watcher's thread lifecycle (poll until stopped, drain what is queued,
hand a failure back to the caller's thread; the fanotify holder is a process of its own, see
:mod:`artifactkit.trace.holder`); :class:`PathSet` is "is this path one of our roots or below one",
matched on resolved paths so a symlinked base still matches what the kernel reports.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Self


class PathSet:
    """Resolved roots, and membership of a path in any of them (the root itself or below it)."""

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        self._prefixes = tuple(os.path.realpath(r).rstrip("/") + "/" for r in roots)
        self._exact = frozenset(p.rstrip("/") for p in self._prefixes)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and (path in self._exact or path.startswith(self._prefixes))


class BackgroundLoop:
    """A daemon thread that runs :meth:`_step` until stopped, then :meth:`_finish` once.

    An exception in the thread is kept and re-raised in the caller's thread by :meth:`_raise_if_failed`
    (after the subclass closed its fd), so a dead watcher can never pass for a quiet one.
    """

    def _start(self, name: str) -> None:
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _step(self) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """After the stop: take what is already queued (events of calls that already returned)."""

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._step()
            self._finish()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = err

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join()

    def _raise_if_failed(self, what: str) -> None:
        if self._error is not None:
            raise RuntimeError(f"the {what} failed: {self._error!r}") from self._error

    @property
    def running(self) -> bool:
        """Whether the thread is still alive (``stop`` not yet called, and no failure)."""
        return self._thread.is_alive()

    def stop(self) -> object:
        """Stop the thread, release the kernel object, return what was seen (subclasses)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running:
            self.stop()

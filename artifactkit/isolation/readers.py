"""Competing readers: the hostile workload that moves atime behind an artifact store's back.

Each reader walks a tree in a loop, listing directories and reading every file and link the way
ordinary programs do (no ``O_NOATIME``): on an unprotected tree that moves atime, which is the
point. Threads suffice: ``os.read`` and the syscalls here release the GIL.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from artifactkit.isolation.reading import read_tree


class ReaderHandle:
    """Running readers over one tree: ``reads`` counts completed reads; ``stop()`` joins them."""

    def __init__(self, root: str | os.PathLike[str], n: int = 4) -> None:
        if n < 1:
            raise ValueError(f"need at least one reader, got n={n}")
        self.root = os.fspath(root)
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._reads = 0
        self._errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._run, name=f"artifactkit-reader-{i}", daemon=True)
                         for i in range(n)]
        for thread in self._threads:
            thread.start()

    @property
    def reads(self) -> int:
        """Completed reads (files read and links resolved) so far, across all readers."""
        with self._cond:
            return self._reads

    def _count(self) -> None:
        with self._cond:
            self._reads += 1
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._sweep():
                    # An empty or vanished tree: wait for more to read without spinning hot.
                    self._stop.wait(0.001)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread by stop()
            with self._cond:
                self._errors.append(err)
                self._cond.notify_all()

    def _sweep(self) -> bool:
        return read_tree(self.root, stop=self._stop.is_set, on_read=self._count)

    def wait_reads(self, count: int, timeout_s: float = 30.0) -> int:
        """Block until at least ``count`` reads completed in total; return the count.

        Raises ``TimeoutError`` (the readers are not reading) or a reader's own error.
        """
        with self._cond:
            done = self._cond.wait_for(lambda: self._reads >= count or bool(self._errors), timeout_s)
            if self._errors:
                raise RuntimeError(f"a competing reader failed: {self._errors[0]!r}") from self._errors[0]
            if not done:
                raise TimeoutError(f"competing readers made {self._reads} reads in {timeout_s} s, "
                                   f"wanted {count}")
            return self._reads

    def stop(self) -> int:
        """Stop and join every reader (idempotent); return the final read count."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise RuntimeError(f"a competing reader failed: {self._errors[0]!r}") from self._errors[0]
        return self.reads

    def __enter__(self) -> ReaderHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_readers(root: str | os.PathLike[str], n: int = 4) -> ReaderHandle:
    """Start ``n`` reader threads over ``root``; ``stop()`` the handle (or use ``with``)."""
    return ReaderHandle(root, n)


@contextlib.contextmanager
def competing_readers(root: str | os.PathLike[str], n: int = 4) -> Iterator[ReaderHandle]:
    """Readers running for the duration of a ``with`` block, stopped and joined on exit."""
    handle = start_readers(root, n)
    try:
        yield handle
    finally:
        handle.stop()

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

#: How much of each file a reader reads per open: enough to be a real read, cheap for big files.
READ_BYTES = 65536


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
        did_read = False
        # os.walk lists directories normally: that moves their atime too, as any reader's would.
        for dirpath, dirs, files in os.walk(self.root):
            # Links to directories are listed among dirs (not followed): read those links too.
            for name in [*(d for d in dirs if os.path.islink(os.path.join(dirpath, d))), *files]:
                if self._stop.is_set():
                    return True
                path = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError,
                                         PermissionError):
                    if os.path.islink(path):
                        os.readlink(path)
                    else:
                        _read_once(path)
                    self._count()
                    did_read = True
        return did_read

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


def _read_once(path: str) -> None:
    # O_NONBLOCK: a FIFO in a hostile tree must not hang a reader.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.read(fd, READ_BYTES)
    finally:
        os.close(fd)


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

"""Competing reader *processes* (``spawn`` context) over several trees, with exact counters.

Each reader lists every directory and reads every file and link of its trees, the way ordinary
programs do (no ``O_NOATIME``), in a loop until stopped. Counters live in shared memory that each
reader writes only in its own slot: ``opens`` (directories and files opened, what inotify and
fanotify see), ``reads`` (files read and links resolved) and ``sweeps`` (complete passes). Their
pids are public so the diagnostic can count their accesses as explained.

No semaphore or manager is used (an ``Event`` would start multiprocessing's resource tracker, one
more process to leave behind); the stop flag is a shared int, and a reader whose parent died stops
by itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import stat
import time
from collections.abc import Sequence
from typing import Any, Final

from artifactkit.isolation.reading import read_file

#: How long :meth:`ReaderPool.stop` waits for a reader before killing it.
STOP_TIMEOUT_S: Final = 10.0
#: The pause between two passes of one reader.
DEFAULT_PAUSE_MS: Final = 1
#: Per reader: four readers at this rate raise ~40k inotify events/s, which the watcher keeps up with.
DEFAULT_MAX_OPENS_PER_S: Final = 2500
_ENTRY_ERRORS: Final = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def _reader_main(index: int, roots: list[str], opens: Any, reads: Any, sweeps: Any,  # noqa: PLR0917
                 stop: Any, parent: int, pause_s: float, max_opens_per_s: int) -> None:
    # (spawn hands the shared counters over positionally: hence the long signature.)
    # The parent decides when readers stop (a terminal's Ctrl-C reaches the whole group): a
    # KeyboardInterrupt here would only print a traceback from a half-finished read.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while not stop.value and os.getppid() == parent:
        began, opened = time.monotonic(), opens[index]
        for root in roots:
            _sweep_dir(root, index, opens, reads, stop)
        sweeps[index] += 1
        # Pace each pass to at most max_opens_per_s (and a short breath at least): past
        # max_queued_events the kernel drops inotify events, and a watcher that lost events
        # can account for nothing. Every pass still reads everything.
        budget_s = (opens[index] - opened) / max_opens_per_s
        time.sleep(max(pause_s, budget_s - (time.monotonic() - began)))


def _sweep_dir(path: str, index: int, opens: Any, reads: Any, stop: Any) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # vanished, replaced or unreadable: nothing to count
    opens[index] += 1
    try:
        names = os.listdir(fd)  # lists the open fd: no second open
    except OSError:
        names = []
    finally:
        os.close(fd)
    for name in names:
        if stop.value:
            return
        full = os.path.join(path, name)
        try:
            mode = os.lstat(full).st_mode
            if stat.S_ISDIR(mode):
                _sweep_dir(full, index, opens, reads, stop)
            elif stat.S_ISLNK(mode):
                os.readlink(full)
                reads[index] += 1
            elif stat.S_ISREG(mode):
                read_file(full, follow=False)
                opens[index] += 1
                reads[index] += 1
        except _ENTRY_ERRORS:
            continue  # removed or replaced while we looked: the next sweep sees the new state


class ReaderPool:
    """``n`` spawned reader processes over ``roots``; ``stop()`` ends and reaps every one."""

    def __init__(self, roots: Sequence[str | os.PathLike[str]], n: int = 4, *,
                 pause_ms: int = DEFAULT_PAUSE_MS, max_opens_per_s: int = DEFAULT_MAX_OPENS_PER_S) -> None:
        if n < 0:
            raise ValueError(f"the number of readers must be >= 0, got {n}")
        ctx = multiprocessing.get_context("spawn")
        self.roots = [os.fspath(r) for r in roots]
        self._opens = ctx.RawArray("q", max(n, 1))
        self._reads = ctx.RawArray("q", max(n, 1))
        self._sweeps = ctx.RawArray("q", max(n, 1))
        self._stop = ctx.RawValue("i", 0)
        self._procs = [ctx.Process(target=_reader_main, name=f"artifactkit-reader-{i}", daemon=True,
                                   args=(i, self.roots, self._opens, self._reads, self._sweeps, self._stop,
                                         os.getpid(), pause_ms / 1000, max_opens_per_s))
                       for i in range(n)]
        self._stopped = False
        try:
            for proc in self._procs:
                proc.start()
        except BaseException:
            self.stop()
            raise
        self._pids = [p.pid for p in self._procs if p.pid is not None]

    @property
    def pids(self) -> list[int]:
        """The readers' pids (their accesses are explained, not foreign)."""
        return list(self._pids)

    @property
    def reads(self) -> int:
        """Files read and links resolved so far, all readers."""
        return sum(self._reads[: len(self._procs)])

    @property
    def opens(self) -> int:
        """Directories and files opened so far, all readers."""
        return sum(self._opens[: len(self._procs)])

    def sweeps(self) -> list[int]:
        """Completed passes per reader."""
        return list(self._sweeps[: len(self._procs)])

    def wait_started(self, timeout_s: float = 60.0) -> None:
        """Block until every reader completed one pass (its interpreter start-up is over)."""
        self.wait_full_sweep([-1] * len(self._procs), timeout_s)

    def wait_full_sweep(self, since: Sequence[int], timeout_s: float = 60.0) -> None:
        """Block until every reader finished a pass that *started* after ``since`` was taken.

        A pass running at that moment may already be past the newest entries, so each reader must
        complete two. This is what makes an observation window meaningful: every reader has read
        every file of the trees at least once inside it.
        """
        deadline = time.monotonic() + timeout_s
        wanted = [count + 2 for count in since]
        while True:
            current = self.sweeps()
            if all(c >= w for c, w in zip(current, wanted, strict=True)):
                return
            dead = [p.name for p in self._procs if not p.is_alive()]
            if dead:
                raise RuntimeError(f"competing reader(s) {', '.join(str(d) for d in dead)} died")
            if time.monotonic() > deadline:
                raise TimeoutError(f"competing readers completed {current} passes in {timeout_s} s, "
                                   f"needed {wanted}")
            time.sleep(0.0002)  # polling shared counters: readers cannot signal without a semaphore

    def stop(self) -> int:
        """Stop every reader, join it (kill after ``STOP_TIMEOUT_S``); return total reads. Idempotent."""
        self._stop.value = 1
        if not self._stopped:
            self._stopped = True
            for proc in self._procs:
                if proc.pid is None:
                    continue
                proc.join(STOP_TIMEOUT_S)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                with contextlib.suppress(ValueError):
                    proc.close()
        return self.reads

    def __enter__(self) -> ReaderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

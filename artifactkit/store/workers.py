"""Worker processes for the per-file work of publish and download: the parent keeps the walk, the
manifest and the commit; batches of files go to children and come back as small results.

Why processes started with ``python -m artifactkit.store.worker_main`` and not ``multiprocessing``:
its "spawn" start re-imports the caller's ``__main__`` (a script without a main guard would publish
again in every child), and "fork" copies a threaded parent. A child here imports artifactkit only,
talks length-prefixed pickles over its stdin/stdout pipes with its own parent (nobody else holds
them), and dies with it (``PR_SET_PDEATHSIG``).

Consistency rules the callers rely on:

- :meth:`WorkerPool.run` returns only when every batch is done, and on *any* failure (a batch that
  raised, a child that died, ``KeyboardInterrupt`` in the parent) it kills and reaps every child
  before raising, so no child is still writing when the caller cleans up its staging.
- A batch's exception is re-raised in the parent as the same exception (artifactkit's errors and
  ``OSError`` pickle with their fields); which batch fails first is not defined, as with threads.
- The parent works too: it takes a batch whenever no child's result is waiting, so ``workers=2``
  is the parent and one child.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, Final, TypeVar

import artifactkit
from artifactkit.store.worker_frames import encode_frame, read_frame, write_raw

T = TypeVar("T")
R = TypeVar("R")


#: Below this many files a pool costs more than it saves: a child's start-up (~0.1 s of imports) takes the
#: other core from the parent's own work. ``diagnostics/bench_workers.py`` on 2 cores: 2 workers were
#: 0.9x of one at 2,000 files, 1.05-1.16x at 5,000 (results/bench-workers.json; docs/performance.md).
PARALLEL_MIN_FILES: Final = 4000
#: Files per batch: large enough that a pickle round trip (~50 us) is a small part of it.
BATCH_FILES: Final = 200
#: More processes than this stop paying on one store's metadata work (directory locks in the kernel).
MAX_WORKERS: Final = 8


class WorkerFailedError(RuntimeError):
    """A worker process died or could not start; the operation was abandoned and nothing made visible."""


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask, as ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - Linux has it
        return os.cpu_count() or 1


def choose_workers(requested: int | None, files: int) -> int:
    """How many processes (the parent counted) do ``files`` files' work.

    ``requested`` ``None`` is automatic: one below :data:`PARALLEL_MIN_FILES` files, else the cores
    available (at most :data:`MAX_WORKERS`); the environment variable ``ARTIFACTKIT_WORKERS`` overrides
    the automatic choice (for tests and CI). Any number, asked or automatic, is then capped by the CPUs
    this process may use (:func:`available_cores`) and by one process per batch of :data:`BATCH_FILES`
    files: a process beyond the number of batches is never given one, and one beyond the cores only
    takes them from the others. Uncapped, ``--workers 40`` started 39 interpreters for one file and
    ``--workers 10000`` took the machine to a load of 145.
    """
    if requested is None:
        forced = os.environ.get("ARTIFACTKIT_WORKERS", "")
        if forced:
            requested = int(forced)
        elif files < PARALLEL_MIN_FILES:
            return 1
        else:
            requested = min(available_cores(), MAX_WORKERS)
    if requested < 1:
        raise ValueError(f"workers must be at least 1, not {requested}")
    if requested == 1:
        return 1  # asked for in-process: no affinity lookup
    needed = -(-files // BATCH_FILES)  # batches, rounded up
    return max(1, min(requested, available_cores(), needed))


def batches(items: Sequence[T], size: int | None = None) -> list[Sequence[T]]:
    """``items`` cut into consecutive batches of at most ``size`` (default :data:`BATCH_FILES`, read when
    called: :func:`choose_workers` counts batches of the same size)."""
    size = BATCH_FILES if size is None else size
    return [items[start:start + size] for start in range(0, len(items), size)]


_WIDE: Final = 1 << 20  # the unprivileged maximum pipe size (/proc/sys/fs/pipe-max-size)
#: A second batch goes to a busy child only if it is this small and both pipes are _WIDE: then neither a
#: parent writing it nor the child writing its previous result can fill a pipe and wait for the other.
_SECOND_BATCH_MAX: Final = 256 << 10


def _widen(stream: IO[bytes]) -> bool:
    """Make a pipe 1 MiB; ``False`` where the kernel refuses (a user past ``pipe-user-pages-soft``)."""
    try:
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, _WIDE)
        return bool(fcntl.fcntl(stream.fileno(), fcntl.F_GETPIPE_SZ) >= _WIDE)
    except OSError:
        return False


def _search_path(package_parent: str) -> str:
    # Only plain string entries: a pathlib.Path in sys.path is accepted by imports but not by join, and
    # an entry holding the separator cannot be passed on at all.
    entries = [package_parent, *(p for p in sys.path if isinstance(p, str) and p and os.pathsep not in p)]
    return os.pathsep.join(entries)


class _Child:
    def __init__(self, task: str) -> None:
        import subprocess  # noqa: PLC0415 - the parent's only: a child importing this module must start fast
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(artifactkit.__file__)))
        env = dict(os.environ)
        # The child imports the same modules as the parent, however the parent found them: its search
        # path is the parent's, ``-S`` skips site (a fifth of a child's start-up) that built it, and ``-P``
        # keeps the current directory off it (``-m`` would put it first: a struct.py there would run).
        env["PYTHONPATH"] = _search_path(package_parent)
        env.pop("ARTIFACTKIT_WORKERS", None)
        try:
            self.proc = subprocess.Popen([sys.executable, "-S", "-P", "-m", "artifactkit.store.worker_main",
                                          str(os.getpid()), task],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
                                         bufsize=0)  # unbuffered: select() must see every frame not yet read
        except OSError as err:
            raise WorkerFailedError(f"cannot start a worker process ({sys.executable}): {err}") from err
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.wide = _widen(self.stdin) & _widen(self.stdout)
        self.pending: list[int] = []  # batch numbers sent, in order
        self.ready = False  # its "ready" message (imports done) has been read

    def takes_another(self, frame_size: int) -> bool:
        """Whether a batch of ``frame_size`` bytes can be sent now without a chance of deadlock (``0``:
        whether any batch could be, asked before one is pickled)."""
        if not self.ready:
            return False
        if not self.pending:
            return True  # an idle child is reading: the write completes whatever its size
        return len(self.pending) < 2 and self.wide and frame_size <= _SECOND_BATCH_MAX

    def send(self, number: int, frame: bytes) -> None:
        self.pending.append(number)
        try:
            write_raw(self.stdin, frame)
        except BrokenPipeError as err:
            raise WorkerFailedError(f"worker process {self.proc.pid} exited "
                                    f"(status {self.proc.poll()})") from err

    def wait_ready(self) -> bool:
        """Read the child's first message, which says its imports are done; ``False`` if it died first."""
        try:
            read_frame(self.stdout)
        except EOFError:
            return False
        self.ready = True
        return True

    def receive(self) -> tuple[int, Any]:
        try:
            status, value = read_frame(self.stdout)
        except EOFError as err:
            raise WorkerFailedError(f"worker process {self.proc.pid} exited mid-batch "
                                    f"(status {self.proc.wait()})") from err
        number = self.pending.pop(0)
        if status == "err":
            raise value
        return number, value

    def signal_kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)

    def close(self) -> None:
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        self.proc.wait()


class WorkerPool:
    """``workers - 1`` child processes plus the parent, for one operation of one ``task`` (a context
    manager). ``task`` names a function of :data:`artifactkit.store.worker_main.TASKS`."""

    def __init__(self, workers: int, task: str) -> None:
        self._children: list[_Child] = []
        try:
            for _ in range(workers - 1):
                self._children.append(_Child(task))
        except BaseException:
            self._kill_all()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        # Killed also on success: by then every result was received and the children are idle. Waiting
        # for them to see end of input could wait for ever if a fork of this process holds their stdin.
        self._kill_all()
        self._children = []

    def _kill_all(self) -> None:
        # Every child is signalled before any is waited for: a second Ctrl-C during one wait must not
        # leave another child alive (and writing) when the caller removes the staging.
        for child in self._children:
            child.signal_kill()
        for child in self._children:
            child.close()

    def run(self, shared: object, work: Sequence[Sequence[T]], local: Callable[[Sequence[T]], list[R]],
            wire: Callable[[Sequence[T]], object] | None = None,
            on_done: Callable[[int], None] | None = None) -> list[list[R]]:
        """Every batch of ``work`` through the task (children) or ``local`` (the parent), results in order.

        A child calls its task as ``function(shared, wire(batch))`` (``batch`` without ``wire``);
        ``local(batch)`` must compute the same. ``wire`` runs only for the batches a child takes: a
        batch the parent does itself is never converted for the pipe and back. ``on_done(number)`` is called
        in the parent as each batch's result arrives (progress).
        """
        done = on_done or (lambda number: None)
        import selectors  # noqa: PLC0415 - the parent's only, like subprocess above
        results: list[list[R] | None] = [None] * len(work)
        encoded: dict[int, bytes] = {}  # a batch pickled once, though it may wait for a child to be free
        next_batch = 0
        try:
            with selectors.DefaultSelector() as selector:
                for child in self._children:
                    selector.register(child.stdout, selectors.EVENT_READ, child)
                while True:
                    # A child gets work once it is ready (a child still starting gets nothing: the parent
                    # does the work rather than wait), a second batch only where no pipe can fill up.
                    for child in self._children:
                        while next_batch < len(work) and child.takes_another(0):
                            frame = encoded.get(next_batch)
                            if frame is None:
                                batch = work[next_batch]
                                frame = encoded[next_batch] = encode_frame((shared, wire(batch) if wire else batch))
                            if not child.takes_another(len(frame)):
                                break  # too big for a second batch: kept, for whoever is free next
                            child.send(next_batch, frame)
                            del encoded[next_batch]
                            next_batch += 1
                    events = selector.select(timeout=0)
                    for key, _ in events:
                        self._take(key.data, selector, results, done)
                    if events:
                        continue
                    if next_batch < len(work):
                        results[next_batch] = local(work[next_batch])
                        done(next_batch)
                        next_batch += 1
                    elif any(child.pending for child in self._children):
                        for key, _ in selector.select():
                            self._take(key.data, selector, results, done)
                    else:
                        break
        except BaseException:
            self._kill_all()  # before the caller removes what the children were writing into
            self._children = []
            raise
        missing = [number for number, batch in enumerate(results) if batch is None]
        if missing:  # never a manifest without some entries
            raise WorkerFailedError(f"batches {missing[:5]} came back from no worker")
        return [batch for batch in results if batch is not None]

    def _take(self, child: _Child, selector: Any, results: list[Any], done: Callable[[int], None]) -> None:
        if not child.ready:
            if child.wait_ready():
                return
            selector.unregister(child.stdout)  # died while starting, given nothing: the parent goes on
            self._children.remove(child)
            child.close()
            return
        number, value = child.receive()
        results[number] = value
        done(number)


class LazyPool:
    """A :class:`WorkerPool` started as soon as the work is known to be big enough, so the children's
    start-up (~0.1 s of imports, on another core) overlaps the parent's serial scan or manifest parse.

    :meth:`expect` is the hint (files seen so far); :meth:`get` gives the pool for the final count, or
    ``None`` to work in-process; :meth:`close` kills and reaps the children.
    """

    def __init__(self, requested: int | None, task: str) -> None:
        self.requested = requested
        self.task = task
        self._pool: WorkerPool | None = None
        self._unavailable = False

    def expect(self, files: int) -> None:
        """``files`` files are coming at least: start the children now if they will be used.

        Where no worker can start (``sys.executable`` not runnable after a privilege drop, no fork
        allowed) the automatic choice works in-process; an explicit ``workers`` (or
        ``ARTIFACTKIT_WORKERS``) raises :class:`WorkerFailedError` instead.
        """
        if self._pool is not None or self._unavailable or choose_workers(self.requested, files) == 1:
            return
        # Sized for the automatic threshold at least (the hint is a lower bound), but an explicit request
        # is sized for the hint itself: padded to PARALLEL_MIN_FILES, it started 39 children for one file.
        hinted = files if self.requested is not None else max(files, PARALLEL_MIN_FILES)
        try:
            self._pool = WorkerPool(choose_workers(self.requested, hinted), self.task)
        except WorkerFailedError:
            if self.requested is not None or os.environ.get("ARTIFACTKIT_WORKERS"):
                raise
            self._unavailable = True

    def get(self, files: int) -> WorkerPool | None:
        """The pool for ``files`` files (started now if the hint came too late), or ``None``."""
        if choose_workers(self.requested, files) == 1:
            return None
        self.expect(files)
        return self._pool

    def close(self) -> None:
        """Kill and reap the children (idle by then, or abandoned on a failure); idempotent."""
        if self._pool is not None:
            self._pool.__exit__(None, None, None)
            self._pool = None

    def __enter__(self) -> LazyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

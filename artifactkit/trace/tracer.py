"""Who opened or read files under some directories: the diagnostic's side of the fanotify holder.

:func:`start_tracer` starts :mod:`artifactkit.trace.holder` as a child process (same interpreter,
``-I``: no environment, no user site) and returns once its mark is in place, or raises
:class:`FanotifyUnavailable` saying why. Where the kernel offers permission events the holder keeps
each outside opener waiting until it is named; elsewhere it falls back to notifications only and
:attr:`FanotifyTracer.status` says so and why. A mount mark sees every process on the mount, so each
event's fd is resolved to a path and kept only under the traced directories. The kernel merges
queued events of one pid on one file, so counts are *events*, not opens; which processes touched
the trees is exact (the queue is unlimited, so nothing overflows).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, Final, Self

import attrs

from artifactkit._fanotify import FanotifyUnavailable, open_group
from artifactkit._syscalls import bind_onto_itself, detach_mount
from artifactkit.trace.holder import BUDGET_MS, WATCHDOG_MS

#: Python start-up on a loaded machine, then the handshake.
START_TIMEOUT_S: Final = 60.0
#: The final drain and the report, after stdin closed.
STOP_TIMEOUT_S: Final = 60.0
_BOOT: Final = ("import sys; sys.path.insert(0, sys.argv[1]); from artifactkit.trace.holder import main; "
                "raise SystemExit(main(sys.argv[2:]))")
#: Where this copy of artifactkit is importable from: the holder runs the very same code.
_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELD: Final = "available: FAN_OPEN_PERM holds an outside opener until it is named"
OWN_MOUNT: Final = "only the traced tree is marked (a bind mount of its own)"


@attrs.frozen
class PidAccesses:
    """Events one process caused under the traced directories, and who it was.

    ``named`` says how: ``held`` (while its first open there waited), ``late`` (when its first event
    was read: notification only, or an access without a traced open), ``self`` or ``reader``.
    """

    pid: int
    executable: str                  #: base name of /proc/PID/exe (never a full path)
    events: int
    chain: tuple[str, ...] = ()      #: ancestors' executables, farthest first
    argv: tuple[str, ...] = ()       #: the command line as read (callers sanitize before sharing)
    named: str = "held"
    complete: bool = True            #: False when the naming budget ran out first


@attrs.frozen
class HoldStats:
    """What holding cost: how many permission events, how many openers waited to be named, how long."""

    mode: str              #: "permission" (openers held until named) or "notification" (nothing held)
    permission_events: int
    named_while_held: int
    cut_short: int         #: namings that ran out of budget (executable kept, chain shortened)
    hold_us_max: int       #: longest wait caused by naming, from the holder's read to its answer
    hold_us_total: int
    budget_ms: int
    watchdog_ms: int


@attrs.frozen
class FanotifyReport:
    """Events under the traced directories per process; ``overflows`` should stay 0 (unlimited queue)."""

    by_pid: tuple[PidAccesses, ...]  #: one per process: a reused pid number appears once per process
    overflows: int
    mode: str                        #: "permission" (openers held until named) or "notification"
    hold: HoldStats

    def events_of(self, pids: set[int]) -> int:
        """Total events caused by ``pids``."""
        return sum(item.events for item in self.by_pid if item.pid in pids)


class _Lines:
    """JSON lines from the holder's stdout, each awaited until a deadline."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = stream.fileno()
        self._buf = b""

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise TimeoutError(f"the fanotify holder said nothing for {timeout_s:.0f} s")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


class FanotifyTracer:
    """A running holder process; :meth:`stop` ends it and returns the :class:`FanotifyReport`."""

    def __init__(self, proc: subprocess.Popen[bytes], lines: _Lines, *, mode: str, why: str, watchdog_ms: int,
                 mounted: str | None, scope: str) -> None:
        self._proc = proc
        self._lines = lines
        self.mode = mode
        self.status = (HELD if mode == "permission" else (
            f"available (notification only: {why}): a reader that exits before it is read stays "
            "'unknown (exited)'")) + f"; {scope}"
        self._watchdog_ms = watchdog_ms
        self._mounted = mounted
        self._report: FanotifyReport | None = None
        self._failed: str | None = None

    @property
    def pid(self) -> int:
        """The holder's pid."""
        return self._proc.pid

    def confine(self, pids: Sequence[int]) -> None:
        """Declare ``pids`` to access nothing but the traced dirs (readers past their start-up)."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(("confine " + " ".join(map(str, pids)) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            return  # the holder is gone: stop() says why

    def stop(self) -> FanotifyReport:
        """Close the holder's stdin, take its report, reap it, drop the tree's own mount;
        ``RuntimeError`` if the holder failed."""
        if self._report is not None:
            return self._report
        if self._failed is not None:
            raise RuntimeError(self._failed)
        try:
            return self._stop_holder()
        finally:
            if self._mounted is not None:
                _detach(self._mounted)
                self._mounted = None

    def close(self) -> None:
        """:meth:`stop` unless done already, for error paths: never raises (a failure is :meth:`stop`'s to tell)."""
        with contextlib.suppress(Exception):
            self.stop()

    def _stop_holder(self) -> FanotifyReport:
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.close()
        try:
            message = self._lines.next(STOP_TIMEOUT_S)
        except TimeoutError:
            self._proc.kill()
            message = None
        code = self._proc.wait()
        try:
            if message is None or "report" not in message:
                self._failed = f"the fanotify holder failed: {self._failure(code)}"
                raise RuntimeError(self._failed)
        finally:
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    stream.close()
        self._report = _report(message["report"], self._watchdog_ms)
        return self._report

    def _failure(self, code: int) -> str:
        assert self._proc.stderr is not None
        said = self._proc.stderr.read().decode(errors="replace").strip().splitlines()
        if code == -signal.SIGALRM:
            how = f"killed by its watchdog (a batch took over {self._watchdog_ms} ms)"
        elif code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exit status {code}"
        return how + (f": {said[-1]}" if said else "") + "; the kernel let every held opener through"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._report is None and self._failed is None:
            self.stop()


def _detach(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # the tree went with its mount
        detach_mount(path)


@contextlib.contextmanager
def tree_mount(path: str) -> Iterator[bool]:
    """``path`` as a mount of its own while the block runs, where allowed (CAP_SYS_ADMIN); yields whether.

    Made while ``path`` is still empty, nothing can be inside it through the mount below: a
    process keeps the mount it opened a directory on, for every path it walks from there.
    """
    try:
        bind_onto_itself(path)
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        _detach(path)


def _own_mount(path: str) -> tuple[str | None, str]:
    """Bind ``path`` onto itself, so the mark (and the hold) covers the traced tree, not the whole
    mount under it — often /, every open of the machine. The mount and why not, if not."""
    try:
        bind_onto_itself(path)
    except OSError as err:
        return None, f"the whole mount is marked (a mount of its own was refused: {err.strerror})"
    return path, OWN_MOUNT


def _report(raw: dict[str, Any], watchdog_ms: int) -> FanotifyReport:
    items = tuple(PidAccesses(p["pid"], p["executable"], p["events"], tuple(p["chain"]), tuple(p["argv"]),
                              p["named"], p["complete"]) for p in raw["processes"])
    hold = HoldStats(mode=raw["mode"], watchdog_ms=watchdog_ms, **raw["hold"])
    return FanotifyReport(tuple(sorted(items, key=lambda i: i.pid)), raw["overflows"], raw["mode"], hold)


def start_tracer(dirs: Sequence[str | os.PathLike[str]], *, hold: bool = True, own_pids: Iterable[int] = (),
                 own_mount: bool = True, budget_ms: int = BUDGET_MS, watchdog_ms: int = WATCHDOG_MS) -> FanotifyTracer:
    """Mark ``dirs[0]`` (made a mount of its own, unless ``own_mount=False`` or refused; else the
    mount holding it) and trace accesses under ``dirs``, or raise :class:`FanotifyUnavailable` saying why.

    ``hold=False`` asks for notifications only. This process and ``own_pids`` are answered without
    being named; ``budget_ms`` bounds each naming, ``watchdog_ms`` a stuck holder. A process that
    already had a directory inside open (or its cwd there) keeps using the mount below, unseen:
    give the tree its mount while it is empty (:func:`tree_mount`), as ``diagnose`` does.
    """
    if not dirs:
        raise ValueError("start_tracer needs at least one directory")
    # Asked here first (a syscall, nothing marked): without CAP_SYS_ADMIN no holder is started at all.
    os.close(open_group(permission=False))
    args = [os.path.realpath(d) for d in dirs]
    if not own_mount:
        mounted, scope = None, "the whole mount is marked (asked for)"
    elif os.path.ismount(args[0]):
        mounted, scope = None, OWN_MOUNT  # tree_mount() or the tree is a filesystem's root
    else:
        mounted, scope = _own_mount(args[0])
    try:
        return _start_holder(args, hold=hold, own_pids=own_pids, budget_ms=budget_ms, watchdog_ms=watchdog_ms,
                             mounted=mounted, scope=scope)
    except BaseException:
        if mounted is not None:
            _detach(mounted)
        raise


def _start_holder(args: list[str], *, hold: bool, own_pids: Iterable[int], budget_ms: int, watchdog_ms: int,
                  mounted: str | None, scope: str) -> FanotifyTracer:
    for pid in {os.getpid(), *own_pids}:
        args += ["--own", str(pid)]
    args += ["--budget-ms", str(budget_ms), "--watchdog-ms", str(watchdog_ms)]
    if not hold:
        args.append("--notification-only")
    proc = subprocess.Popen([sys.executable, "-I", "-c", _BOOT, _ROOT, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = _Lines(proc.stdout)  # type: ignore[arg-type]
    try:
        message = lines.next(START_TIMEOUT_S)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if message is None or "ready" not in message:
        proc.stdin.close()  # type: ignore[union-attr]
        code = proc.wait()
        if message is not None and "unavailable" in message:
            raise FanotifyUnavailable(message["unavailable"]["errno"], message["unavailable"]["message"])
        said = proc.stderr.read().decode(errors="replace").strip()  # type: ignore[union-attr]
        raise RuntimeError(f"the fanotify holder did not start (exit status {code}): {said or 'no message'}")
    return FanotifyTracer(proc, lines, mode=message["ready"]["mode"], why=message["ready"]["why"],
                          watchdog_ms=watchdog_ms, mounted=mounted, scope=scope)

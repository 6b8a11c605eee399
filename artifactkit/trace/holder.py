"""The fanotify holder: a small process that keeps an outside opener waiting until it has been named.

A short-lived reader (``find … -exec cat {} +``) used to be gone before its ``/proc/PID/exe`` was
read: "unknown (exited)". Here a permission group (``FAN_CLASS_CONTENT``) marks the work tree's
mount for ``FAN_OPEN_PERM`` as well as the counted ``FAN_OPEN``/``FAN_ACCESS``: every open on that
mount waits in the kernel until :func:`~artifactkit._fanotify.allow` answers. Most are answered
at once; only the *first* open inside the traced directories by a process not yet named waits
while its executable, command line and parent chain are read (:func:`name_process`, within a
budget, BUDGET_MS). ``FAN_ACCESS_PERM`` is not used: it would hold every ``read()`` on the mount,
and every read follows an open that was already held.

Why a process and not a thread of the diagnostic: a thread needs the GIL to answer, and a thread of
the same process blocked in ``open()`` on the marked mount may hold it (importing an extension
module: CPython's ``dynload_shlib.c`` calls ``dlopen`` with the GIL held) — then nothing could
answer again. The holder has one thread, opens nothing but procfs after the mark, imports nothing
after the mark, and ignores SIGINT (the parent decides when it stops). Whatever goes wrong, its
group fd closes (``finally``, or the process dies) and the kernel then lets every waiting opener
through. A stuck holder is killed by its own ``SIGALRM`` (left at its default action, re-armed
before every batch): the watchdog needs no Python to fire.

Counting is unchanged by the hold: ``events`` are the notification events (``FAN_OPEN``,
``FAN_ACCESS``, which the kernel merges while queued) under the traced directories; the permission
events only decide when an opener may go on. A pid number can come back within one run (pid_max
is 32768 on the machine this was built on, and a find/cat loop uses hundreds a second): a pidfd per
named process tells when it exited, and its next held open starts a new record, not the old name.

Protocol (the parent is :mod:`artifactkit.trace.tracer`): arguments name the directories; stdin
takes ``confine PID…`` lines and EOF means stop; stdout gets one JSON line ``{"ready": …}`` or
``{"unavailable": …}``, and at the end ``{"report": …}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from artifactkit._fanotify import (
    COUNTED_EVENTS,
    FAN_NOFD,
    FanMask,
    FanotifyUnavailable,
    allow,
    mark_mount,
    open_group,
    parse,
    path_of,
)
from artifactkit.trace.background import PathSet
from artifactkit.trace.procnames import ProcessName, executable, name_process

#: How long naming one opener may keep it waiting; what was read by then is kept. Naming takes
#: about 0.2 ms of work, but the clock is the wall's: at 5 ms a busy two-core machine cut one
#: chain in four runs (the holder preempted mid-naming), at 20 ms none in the acceptance runs.
BUDGET_MS: Final = 20
#: A batch that takes longer than this means the holder is stuck: SIGALRM ends it.
WATCHDOG_MS: Final = 2000
_POLL_MS: Final = 50
_EVENT_BYTES: Final = 24  # sizeof(struct fanotify_event_metadata)
#: The kernel *denies* a permission event whose fd it cannot install in the holder (seen on 6.18:
#: with the fd table full, ``cat`` got EPERM). So reads are sized to the fd limit, with room left.
_FD_RESERVE: Final = 128
HOLD_MASK: Final = FanMask.FAN_OPEN_PERM | COUNTED_EVENTS


class _Record:
    """One process (a pid number may stand for several in one run) and its events."""

    __slots__ = ("alive", "events", "name", "named", "pid", "pidfd", "since")

    def __init__(self, pid: int, since: int, name: ProcessName, named: str) -> None:
        self.pid, self.since, self.name, self.named = pid, since, name, named
        self.events = 0
        self.alive = False
        self.pidfd = -1

    def as_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "executable": self.name.executable, "chain": list(self.name.chain),
                "argv": list(self.name.argv), "complete": self.name.complete, "named": self.named,
                "events": self.events}


class Holder:
    """Answers, names and counts the events of one group fd; the caller polls and calls :meth:`drain`.

    ``namer`` and ``heartbeat`` are seams: the process passes :func:`name_process` and the watchdog
    re-arm, tests pass recorders.
    """

    def __init__(self, group_fd: int, dirs: Iterable[str], *, permission: bool, own_pids: Iterable[int],
                 budget_ns: int = BUDGET_MS * 1_000_000, namer: Callable[..., ProcessName] = name_process,
                 heartbeat: Callable[[], object] = lambda: None) -> None:
        self.fd = group_fd
        self.permission = permission
        self._inside = PathSet(list(dirs))
        self._budget_ns = budget_ns
        self._namer = namer
        self._heartbeat = heartbeat
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        room = max(64, (limit - _FD_RESERVE) // 2)  # half for one batch's event fds, half for pidfds
        self._read_bytes = _EVENT_BYTES * min(room, 4096)
        self._max_pidfds = room
        self._pidfds: dict[int, _Record] = {}
        self._exits = select.poll()
        self._known = {pid: _Record(pid, -1, ProcessName(executable(pid)), "self") for pid in own_pids}
        self._confined: frozenset[int] = frozenset()
        self._records: dict[int, list[_Record]] = {}
        self._seq = 0
        self.overflows = 0
        self.permission_events = 0
        self.named_while_held = 0
        self.cut_short = 0
        self.hold_ns_max = 0
        self.hold_ns_total = 0

    def confine(self, pids: Iterable[int]) -> None:
        """Declare ``pids`` (the readers) to open nothing but the traced dirs: answered and counted unread."""
        for pid in pids:
            self._known.setdefault(pid, _Record(pid, -1, ProcessName(executable(pid)), "reader"))
        self._confined = frozenset(pid for pid, rec in self._known.items() if rec.named == "reader")

    def drain(self) -> None:
        """Handle everything queued now."""
        while True:
            self._heartbeat()
            try:
                buf = os.read(self.fd, self._read_bytes)
            except BlockingIOError:
                return
            if not buf:
                return
            self.handle(buf)

    def handle(self, buf: bytes) -> None:
        """One batch: answer who needs no naming, then name and answer, then count."""
        read_ns = time.monotonic_ns()
        events = parse(buf)
        first = self._seq
        self._seq += len(events)
        asking = [i for i, ev in enumerate(events) if ev.needs_answer and ev.fd != FAN_NOFD]
        unanswered = set(asking)
        counted = 0
        try:
            self._reap()
            self.permission_events += len(asking)
            for i in asking:
                if events[i].pid in self._known or self._live(events[i].pid):
                    self._answer(events[i].fd, unanswered, i)
            for i in [i for i in asking if i in unanswered]:
                ev = events[i]
                try:
                    # _live again: an earlier event of this batch may have named the same process.
                    if not self._live(ev.pid) and path_of(ev.fd) in self._inside:
                        self._start(ev.pid, first + i, "held")
                        held = time.monotonic_ns() - read_ns
                        self.named_while_held += 1
                        self.hold_ns_total += held
                        self.hold_ns_max = max(self.hold_ns_max, held)
                finally:
                    self._answer(ev.fd, unanswered, i)
            for i, ev in enumerate(events):
                counted = i + 1
                if not ev.needs_answer:
                    self._count(ev.mask, ev.fd, ev.pid, first + i)
        finally:
            # Only after a failure: nobody may be left waiting on us, and no event fd left open.
            for i in sorted(unanswered):
                self._answer(events[i].fd, unanswered, i)
            for ev in events[counted:]:
                if not ev.needs_answer and ev.fd != FAN_NOFD:
                    os.close(ev.fd)

    def _answer(self, event_fd: int, unanswered: set[int], index: int) -> None:
        unanswered.discard(index)
        try:
            allow(self.fd, event_fd)
        finally:
            os.close(event_fd)

    def _live(self, pid: int) -> bool:
        records = self._records.get(pid)
        return records is not None and records[-1].alive

    def _start(self, pid: int, seq: int, named: str) -> _Record:
        name = self._namer(pid, budget_ns=self._budget_ns)
        self.cut_short += not name.complete
        record = _Record(pid, seq, name, named)
        records = self._records.setdefault(pid, [])
        records.append(record)
        records.sort(key=lambda r: r.since)
        if not self.permission:
            return record  # no later held open could start a new record: nothing to watch
        if len(self._pidfds) >= self._max_pidfds:
            record.alive = True  # out of room to watch it: assume it lives on (a reused pid would merge)
            return record
        try:
            record.pidfd = os.pidfd_open(pid)
        except OSError:
            return record  # exited already (a late name) or not a process leader
        record.alive = True
        self._pidfds[record.pidfd] = record
        self._exits.register(record.pidfd, select.POLLIN)
        return record

    def _reap(self) -> None:
        """Records of processes that exited since the last batch stop being live (their pid may return)."""
        if not self._pidfds:
            return
        for pidfd, _ in self._exits.poll(0):
            record = self._pidfds.pop(pidfd)
            record.alive = False
            self._exits.unregister(pidfd)
            os.close(pidfd)

    def _count(self, mask: int, event_fd: int, pid: int, seq: int) -> None:
        if event_fd == FAN_NOFD:
            self.overflows += bool(mask & FanMask.FAN_Q_OVERFLOW)
            return
        try:
            known = self._known.get(pid)
            if known is not None and pid in self._confined:
                known.events += 1  # readers open nothing else: skip the costly readlink
                return
            if path_of(event_fd) not in self._inside:
                return
            if known is not None:
                known.events += 1
                return
            record = self._record_at(pid, seq) or self._start(pid, seq, "late")
            record.events += 1
        finally:
            os.close(event_fd)

    def _record_at(self, pid: int, seq: int) -> _Record | None:
        """The process ``pid`` was at ``seq``. An event older than its first record is that same
        process's (it had a directory open before its first held open), not a new one."""
        records = self._records.get(pid)
        if not records:
            return None
        for record in reversed(records):
            if record.since <= seq:
                return record
        return records[0]

    def close(self) -> None:
        """Release the pidfds (the group fd is the caller's)."""
        for pidfd in self._pidfds:
            os.close(pidfd)
        self._pidfds.clear()

    def report(self) -> dict[str, Any]:
        """Everything seen, as the JSON the parent reads."""
        # A process that waited to be named but then caused no counted event (its open failed) is
        # still shown: it tried. Our own and the readers' idle pids are not.
        records = [*(r for r in self._known.values() if r.events),
                   *(r for rs in self._records.values() for r in rs)]
        return {"mode": "permission" if self.permission else "notification",
                "processes": [r.as_json() for r in records], "overflows": self.overflows,
                "hold": {"permission_events": self.permission_events, "named_while_held": self.named_while_held,
                         "cut_short": self.cut_short, "hold_us_max": self.hold_ns_max // 1000,
                         "hold_us_total": self.hold_ns_total // 1000, "budget_ms": self._budget_ns // 1_000_000}}


def serve(holder: Holder, control_fd: int) -> None:
    """Poll the group and the control pipe until the pipe closes; then take what is still queued."""
    poller = select.poll()
    poller.register(holder.fd, select.POLLIN)
    poller.register(control_fd, select.POLLIN)
    pending = b""
    while True:
        holder.drain()
        for fd, _ in poller.poll(_POLL_MS):
            if fd != control_fd:
                continue
            chunk = os.read(control_fd, 4096)
            if not chunk:
                holder.drain()
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                word, *args = line.split()
                if word == b"confine":
                    holder.confine(int(a) for a in args)


def _send(message: dict[str, Any]) -> None:
    os.write(sys.stdout.fileno(), (json.dumps(message) + "\n").encode())


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _open(dirs: list[str], hold: bool) -> tuple[int, bool, str]:
    """The group fd, whether it holds, and why not (falls back to notification only)."""
    why = "holding disabled for this run"
    if hold:
        try:
            fd = open_group(permission=True)
        except FanotifyUnavailable as err:
            why = f"fanotify_init(FAN_CLASS_CONTENT) failed: {os.strerror(err.errno or 0)}"
        else:
            try:
                mark_mount(fd, dirs[0], HOLD_MASK)
            except FanotifyUnavailable as err:
                os.close(fd)
                why = f"this mount refuses FAN_OPEN_PERM: {os.strerror(err.errno or 0)}"
            else:
                return fd, True, ""
    fd = open_group(permission=False)
    try:
        mark_mount(fd, dirs[0], COUNTED_EVENTS)
    except BaseException:
        os.close(fd)
        raise
    return fd, False, why


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="artifactkit's fanotify holder (started by the diagnose tracer)")
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--own", type=int, action="append", default=[], help="pids answered without naming")
    parser.add_argument("--notification-only", action="store_true")
    parser.add_argument("--budget-ms", type=int, default=BUDGET_MS)
    parser.add_argument("--watchdog-ms", type=int, default=WATCHDOG_MS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # fatal by default: that is the watchdog
    _raise_fd_limit()
    try:
        fd, permission, why = _open(args.dirs, not args.notification_only)
    except FanotifyUnavailable as err:
        _send({"unavailable": {"errno": err.errno, "message": err.strerror}})
        return 0
    watchdog_s = args.watchdog_ms / 1000
    try:
        holder = Holder(fd, args.dirs, permission=permission, own_pids=[os.getpid(), *args.own],
                        budget_ns=args.budget_ms * 1_000_000, namer=name_process,
                        heartbeat=lambda: signal.setitimer(signal.ITIMER_REAL, watchdog_s))
        _send({"ready": {"mode": "permission" if permission else "notification", "why": why}})
        try:
            serve(holder, sys.stdin.fileno())
        finally:
            holder.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        # Before anything that might open a file on the mount (a traceback reads source lines):
        # closing the group lets every opener still waiting on us through.
        os.close(fd)
    _send({"report": holder.report()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

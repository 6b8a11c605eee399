"""fanotify via ctypes: which pid (and executable) opened or read files under some directories.

inotify cannot name a reader; fanotify can, but only with CAP_SYS_ADMIN. :func:`start_tracer`
returns a running :class:`FanotifyTracer`, or raises :class:`FanotifyUnavailable` whose message says
why (no capability, no syscall) — callers report that instead of guessing. A mount mark sees every
process on the mount, so each event's fd is resolved to a path and kept only under the traced
directories. The kernel merges queued events of one pid on one file, so counts are *events*, not
opens; which pids touched the trees is exact (the queue is unlimited, so nothing overflows).
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import enum
import errno
import os
import select
import struct
import threading
from collections.abc import Sequence
from typing import Final

import attrs

from artifactkit.trace.background import BackgroundLoop, PathSet


class FanMask(enum.IntFlag):
    """fanotify event bits with their kernel names (include/uapi/linux/fanotify.h)."""

    FAN_ACCESS = 0x00000001
    FAN_MODIFY = 0x00000002
    FAN_CLOSE_WRITE = 0x00000008
    FAN_CLOSE_NOWRITE = 0x00000010
    FAN_OPEN = 0x00000020
    FAN_Q_OVERFLOW = 0x00004000
    FAN_EVENT_ON_CHILD = 0x08000000
    FAN_ONDIR = 0x40000000


# fanotify_init flags and fanotify_mark flags (include/uapi/linux/fanotify.h).
FAN_CLOEXEC: Final = 0x00000001
FAN_NONBLOCK: Final = 0x00000002
FAN_CLASS_NOTIF: Final = 0x00000000
FAN_UNLIMITED_QUEUE: Final = 0x00000010
FAN_MARK_ADD: Final = 0x00000001
FAN_MARK_MOUNT: Final = 0x00000010
FANOTIFY_METADATA_VERSION: Final = 3
#: struct fanotify_event_metadata: __u32 event_len; __u8 vers, reserved; __u16 metadata_len;
#: __aligned_u64 mask; __s32 fd; __s32 pid.
_METADATA: Final = struct.Struct("=IBBHQii")
FAN_NOFD: Final = -1
AT_FDCWD: Final = -100
_POLL_MS: Final = 20

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - a platform without a C library by that name: fails on use
    _libc = None


class FanotifyUnavailable(OSError):  # noqa: N818 - says what happened, like FileNotFoundError
    """fanotify cannot be used here (no CAP_SYS_ADMIN, no syscall); the message says which."""


@attrs.frozen
class PidAccesses:
    """Events one process caused under the traced directories."""

    pid: int
    executable: str  #: base name of ``/proc/<pid>/exe`` (sanitized: never a full path)
    events: int


@attrs.frozen
class FanotifyReport:
    """Events under the traced directories per pid; ``overflows`` should stay 0 (unlimited queue)."""

    by_pid: tuple[PidAccesses, ...]
    overflows: int

    def events_of(self, pids: set[int]) -> int:
        """Total events caused by ``pids``."""
        return sum(item.events for item in self.by_pid if item.pid in pids)


def _executable(pid: int) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        # Gone already (or a kernel thread): the command name may still be known from comm.
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
                return handle.read().strip() or "unknown"
        except OSError:
            return "unknown (exited)"


class FanotifyTracer(BackgroundLoop):
    """A mount mark for FAN_OPEN | FAN_ACCESS (dirs too), read on its own thread."""

    def __init__(self, fd: int, dirs: Sequence[str]) -> None:
        self._fd = fd
        self._inside = PathSet(dirs)
        self._events: collections.Counter[int] = collections.Counter()
        self._exes: dict[int, str] = {}
        self._overflows = 0
        self._inside_pids: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLIN)
        self._start("artifactkit-fanotify")

    def _step(self) -> None:
        if self._poller.poll(_POLL_MS):
            self._drain()

    def _finish(self) -> None:
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            if not buf:
                return
            self._parse(buf)

    def _parse(self, buf: bytes) -> None:
        offset = 0
        while offset + _METADATA.size <= len(buf):
            length, vers, _, _, mask, fd, pid = _METADATA.unpack_from(buf, offset)
            offset += max(length, _METADATA.size)
            if vers != FANOTIFY_METADATA_VERSION:
                raise OSError(errno.EPROTO, f"fanotify metadata version {vers}, expected "
                                            f"{FANOTIFY_METADATA_VERSION}")
            if mask & FanMask.FAN_Q_OVERFLOW:
                with self._lock:
                    self._overflows += 1
            if fd == FAN_NOFD:
                continue
            if pid in self._inside_pids:
                # Everything these pids open is under the traced dirs: skip the costly readlink.
                os.close(fd)
                with self._lock:
                    self._events[pid] += 1
                continue
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            finally:
                os.close(fd)
            if path in self._inside:
                with self._lock:
                    self._events[pid] += 1
                    if pid not in self._exes:
                        # Read now, while the process most likely still runs.
                        self._exes[pid] = _executable(pid)

    def confine(self, pids: Sequence[int]) -> None:
        """Declare ``pids`` to access nothing but the traced dirs (readers past their start-up)."""
        with self._lock:
            for pid in pids:
                self._exes.setdefault(pid, _executable(pid))
            self._inside_pids = frozenset(pids)

    def report(self) -> FanotifyReport:
        """Events per pid so far (final once :meth:`stop` returned)."""
        with self._lock:
            items = tuple(PidAccesses(pid, self._exes.get(pid, "unknown"), count)
                          for pid, count in sorted(self._events.items()))
            return FanotifyReport(items, self._overflows)

    def stop(self) -> FanotifyReport:
        """Drain, stop the thread and close the fanotify fd; return the report."""
        self._halt()
        os.close(self._fd)
        self._raise_if_failed("fanotify reader")
        return self.report()


def start_tracer(dirs: Sequence[str | os.PathLike[str]]) -> FanotifyTracer:
    """Mark the mount holding ``dirs[0]`` and trace accesses under ``dirs``, or raise
    :class:`FanotifyUnavailable` saying why."""
    if not dirs:
        raise ValueError("start_tracer needs at least one directory")
    init = getattr(_libc, "fanotify_init", None)
    mark = getattr(_libc, "fanotify_mark", None)
    if init is None or mark is None:
        raise FanotifyUnavailable(errno.ENOSYS, "fanotify unavailable: the C library has no fanotify_init")
    init.restype = ctypes.c_int
    fd = init(ctypes.c_uint(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE),
              ctypes.c_uint(os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_LARGEFILE", 0)))
    if fd < 0:
        err = ctypes.get_errno()
        why = "needs CAP_SYS_ADMIN" if err == errno.EPERM else os.strerror(err)
        raise FanotifyUnavailable(err, f"fanotify unavailable: fanotify_init failed ({why}); "
                                       "inotify alone cannot name a reader")
    paths = [os.fspath(d) for d in dirs]
    mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    events = FanMask.FAN_OPEN | FanMask.FAN_ACCESS | FanMask.FAN_ONDIR
    if mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, int(events), AT_FDCWD, os.fsencode(paths[0])) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise FanotifyUnavailable(err, f"fanotify unavailable: fanotify_mark on the mount failed "
                                       f"({os.strerror(err)})")
    return FanotifyTracer(fd, paths)


def probe_fanotify() -> str:
    """``"available"``, or ``"unavailable: <why>"`` without leaving anything marked."""
    try:
        tracer = start_tracer(["/"])
    except FanotifyUnavailable as err:
        return str(err.strerror or err)
    tracer.stop()
    return "available"

"""Who a process is, read from /proc: executable, command line and parent chain, within a time budget.

The fanotify holder calls :func:`name_process` while the process it names waits in ``open()``, so
everything here reads procfs only (a mount the holder never marks), opens nothing else, imports
nothing on use, and stops reading when the budget is spent: what was read by then is kept, and
``complete`` says the chain was cut short. Names are base names (``cat``, never ``/usr/bin/cat``);
the command line is kept as given, and the evidence sanitizes it before anything leaves the machine.
"""

from __future__ import annotations

import os
import time
from typing import Final

import attrs

UNKNOWN_EXITED: Final = "unknown (exited)"
#: Ancestors recorded at most (parent first); pid 1 ends a chain earlier.
MAX_DEPTH: Final = 8
#: One read of /proc/PID/cmdline: enough for a command and its first arguments.
CMDLINE_BYTES: Final = 4096


@attrs.frozen
class ProcessName:
    """What could be read about one process."""

    executable: str              #: base name of /proc/PID/exe; the kernel's comm when that is unreadable
    chain: tuple[str, ...] = ()  #: ancestors' executables, farthest first: ("bash", "sh", "find") for a cat
    argv: tuple[str, ...] = ()   #: /proc/PID/cmdline as given (unsanitized)
    complete: bool = True        #: False when the budget ran out before cmdline and chain were read


def _read(path: str, size: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat(pid: int) -> tuple[str, int] | None:
    """``(comm, ppid)`` from /proc/PID/stat; comm may hold spaces and parentheses, so split at the last ")"."""
    raw = _read(f"/proc/{pid}/stat", 1024)
    if not raw:
        return None
    head, _, tail = raw.rpartition(b")")
    fields = tail.split()
    if len(fields) < 2 or b"(" not in head:
        return None
    comm = head.partition(b"(")[2].decode("utf-8", "replace")
    return comm, int(fields[1])


def _exe(pid: int) -> str | None:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None  # exited, a zombie, or a kernel thread (no mm)


def executable(pid: int) -> str:
    """Base name of the executable, else the kernel's comm (a zombie, a kernel thread), else "unknown (exited)"."""
    exe = _exe(pid)
    if exe is not None:
        return exe
    stat = _stat(pid)
    return stat[0] if stat is not None and stat[0] else UNKNOWN_EXITED


def _argv(pid: int) -> tuple[str, ...]:
    raw = _read(f"/proc/{pid}/cmdline", CMDLINE_BYTES) or b""
    return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)


def name_process(pid: int, *, budget_ns: int, max_depth: int = MAX_DEPTH) -> ProcessName:
    """Executable first (always), then command line and ancestors while ``budget_ns`` lasts."""
    deadline = time.monotonic_ns() + budget_ns
    exe = executable(pid)
    if time.monotonic_ns() >= deadline:
        return ProcessName(exe, complete=False)
    argv = _argv(pid)
    stat = _stat(pid)
    parent = stat[1] if stat is not None else 0
    chain: list[str] = []
    complete = True
    while parent > 0 and len(chain) < max_depth:
        if time.monotonic_ns() >= deadline:
            complete = False
            break
        up = _stat(parent)
        if up is None:
            break  # the parent went away (re-parented since): the chain ends here
        chain.append(_exe(parent) or up[0])
        if parent == 1:
            break
        parent = up[1]
    return ProcessName(exe, tuple(reversed(chain)), argv, complete)

"""The durability-order check: an strace of a real publish, read against the rules a crash-safe
publish must follow (rule 1: every rename into a visible name comes after the flush of what it names;
rule 2: each new name's directory is fsynced before publish returns).

There is no device-mapper here, so power loss cannot be replayed at block level; the order of the
system calls is what can be checked, and a deliberately broken publish must fail the check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs

from tests.support import fault_workers
from tests.support.crash import Materials

_LINE = re.compile(r"^(?:\d+ +)?(\w+)\((.*)\) += (-?\d+)")
_FD = re.compile(r"^(?:AT_FDCWD|-?\d+)<([^>]*)>")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


@attrs.frozen
class Event:
    index: int
    call: str
    fds: tuple[str, ...]  # paths strace -y decoded for fd arguments, in order
    strings: tuple[str, ...]  # string (path) arguments, in order
    ret_path: str | None  # the path of a returned fd (openat)
    args: str


_UNFINISHED = re.compile(r"^(\d+) +(.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)$")


def joined_lines(text: str) -> list[str]:
    """The trace's lines with each call that another thread or process interrupted put back together.

    With several threads (the native core's) or processes, ``strace -f`` prints a call that another one's
    line cut in two as ``PID call(args <unfinished ...>`` and later ``PID <... call resumed>rest``; the
    call took effect when it returned, so the joined line takes the place of the resumed half.
    """
    pending: dict[str, str] = {}
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if (cut := _UNFINISHED.match(line)) is not None:
            pending[cut.group(1)] = cut.group(2)
            continue
        if (rest := _RESUMED.match(line)) is not None and rest.group(1) in pending:
            line = f"{rest.group(1)} {pending.pop(rest.group(1))}{rest.group(3)}"
        lines.append(line)
    return lines


def parse_trace(text: str) -> list[Event]:
    """Successful calls of ``strace -f -y`` output, with fd paths and string arguments pulled out."""
    events: list[Event] = []
    for line in joined_lines(text):
        match = _LINE.match(line)
        if match is None or int(match.group(3)) < 0:
            continue  # failed calls change nothing
        call, args = match.group(1), match.group(2)
        fds = tuple(m.group(1) for part in args.split(", ") if (m := _FD.match(part)))
        strings = tuple(s.encode().decode("unicode_escape") for s in _STR.findall(args))
        ret = re.search(r"\) += \d+<([^>]*)>", line)
        events.append(Event(len(events), call, fds, strings, ret.group(1) if ret else None, args))
    return events


def _join(base: str, name: str) -> str:
    return name if name.startswith("/") else os.path.normpath(os.path.join(base, name))


def check_durability(text: str, store_root: str, marker: str) -> tuple[list[str], int]:
    """Violations of the three rules in a trace, and how many visible renames were checked."""
    events = parse_trace(text)
    ends = _marker_positions(text, marker)
    dirty: dict[str, int] = {}  # path -> index of its last write or creation
    flushed_all: list[int] = []  # syncfs positions
    fsyncs: dict[str, list[int]] = {}
    renames: list[tuple[int, str, str]] = []
    mkdirs: list[tuple[int, str]] = []
    for event in events:
        if event.call in ("write", "pwrite64", "writev", "pwritev", "pwritev2", "ftruncate") and event.fds:
            dirty[event.fds[0]] = event.index
        elif event.call in ("openat", "open", "creat") and "O_CREAT" in event.args and event.ret_path:
            dirty.setdefault(event.ret_path, event.index)
        elif event.call in ("fsync", "fdatasync") and event.fds:
            fsyncs.setdefault(event.fds[0], []).append(event.index)
        elif event.call == "syncfs":
            flushed_all.append(event.index)
        elif event.call in ("rename", "renameat", "renameat2"):
            if event.call == "rename":
                src, dst = event.strings[0], event.strings[1]
            else:
                src, dst = _join(event.fds[0], event.strings[0]), _join(event.fds[1], event.strings[1])
            renames.append((event.index, src, dst))
        elif event.call in ("mkdir", "mkdirat"):
            path = event.strings[0] if event.call == "mkdir" else _join(event.fds[0], event.strings[0])
            mkdirs.append((event.index, os.path.normpath(path)))
    visible_roots = (os.path.join(store_root, "blobs") + "/", os.path.join(store_root, "manifests") + "/")
    problems: list[str] = []
    checked = 0

    def flushed_between(path: str, start: int, end: int) -> bool:
        return any(start < i < end for i in fsyncs.get(path, []) + flushed_all)

    def returned_after(index: int) -> int:
        return min((end for end in ends if end > index), default=len(events) + 1)

    for index, src, dst in renames:
        if not dst.startswith(visible_roots):
            continue
        checked += 1
        written = dirty.get(src)
        if written is None:
            problems.append(f"{dst}: renamed from {src}, which this trace never created or wrote")
        elif not flushed_between(src, written, index):
            problems.append(f"{dst}: renamed into place before its content was flushed (rule 1)")
        parent = os.path.dirname(dst)
        if not any(index < i < returned_after(index) for i in fsyncs.get(parent, [])):
            problems.append(f"{dst}: its directory {parent} was not fsynced after the rename (rule 2)")
    needed = {os.path.dirname(dst) for _, _, dst in renames if dst.startswith(visible_roots)}
    ancestors = {a for path in needed for a in _ancestors(path, store_root)}
    for index, path in mkdirs:
        if path in ancestors and not any(
                index < i < returned_after(index) for i in fsyncs.get(os.path.dirname(path), [])):
            problems.append(f"{path}: created, but {os.path.dirname(path)} was never fsynced after (rule 3)")
    return problems, checked


def _marker_positions(text: str, marker: str) -> list[int]:
    """Event positions at which publish had returned (the child stats ``marker`` right after)."""
    positions, count = [], 0
    for line in joined_lines(text):
        if marker in line:
            positions.append(count)
        match = _LINE.match(line)
        if match is not None and int(match.group(3)) >= 0:
            count += 1
    return positions


def _ancestors(path: str, store_root: str) -> list[str]:
    found = []
    while path.startswith(store_root) and path != os.path.dirname(store_root):
        found.append(path)
        path = os.path.dirname(path)
    return found


def traced_publish(sources: Materials, tmp: Path, variant: str, *,
                   trees: tuple[Path, Path] | None = None) -> tuple[list[str], int]:
    """Publish two versions under ``strace -f`` (which follows threads too) and check the order; ``trees``
    replaces the two sources."""
    store = tmp / f"store-{variant}"
    trace = tmp / f"trace-{variant}.txt"
    # Two versions of one name: the first creates the store and the name; the second streams a
    # blob larger than the in-memory limit and deduplicates the rest.
    subprocess.run(
        ["strace", "-f", "-y", "-qq", "-s", "0", "-o", str(trace),
         "-e", "trace=%file,%desc,fsync,fdatasync,syncfs,rename,renameat2",
         sys.executable, fault_workers.__file__, "publish", variant, str(store), "demo",
         *(str(tree) for tree in trees or (sources.base / "src-demo1", sources.base / "src-demo2"))],
        check=True, capture_output=True, timeout=120)
    return check_durability(trace.read_text(), str(store), fault_workers.RETURN_MARKER)

"""Watch trees with inotify and trace this process's own opens, so accesses can be accounted for.

inotify sees every open and read of a watched directory's children (ours, the readers', anyone's)
but never says *who*: the kernel event carries no pid. So the diagnostic counts from three sides
and reconciles them: opens the kernel reported (:class:`Watcher`), opens this process made
(:class:`SelfOpenTracer`, an audit hook) and opens the competing readers made (their counters).
What is left over is *unexplained*; naming it needs fanotify (:mod:`artifactkit.trace.tracer`).
"""

from __future__ import annotations

import collections
import enum
import importlib
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from artifactkit._syscalls import opened_dir
from artifactkit.trace.background import BackgroundLoop, PathSet


class InotifyMask(enum.IntFlag):
    """inotify event bits with their kernel names (include/uapi/linux/inotify.h)."""

    IN_ACCESS = 0x00000001
    IN_MODIFY = 0x00000002
    IN_ATTRIB = 0x00000004
    IN_CLOSE_WRITE = 0x00000008
    IN_CLOSE_NOWRITE = 0x00000010
    IN_OPEN = 0x00000020
    IN_MOVED_FROM = 0x00000040
    IN_MOVED_TO = 0x00000080
    IN_CREATE = 0x00000100
    IN_DELETE = 0x00000200
    IN_DELETE_SELF = 0x00000400
    IN_MOVE_SELF = 0x00000800
    IN_UNMOUNT = 0x00002000
    IN_Q_OVERFLOW = 0x00004000
    IN_IGNORED = 0x00008000
    IN_ONLYDIR = 0x01000000
    IN_DONT_FOLLOW = 0x02000000
    IN_EXCL_UNLINK = 0x04000000
    IN_MASK_ADD = 0x20000000
    IN_ISDIR = 0x40000000
    IN_ONESHOT = 0x80000000


#: What the issue asks to see (open, access, close, attrib, modify) plus what keeps the watch
#: recursive (new and moved-in directories) — only for directories, never following a link.
WATCH_MASK: Final = (InotifyMask.IN_OPEN | InotifyMask.IN_ACCESS | InotifyMask.IN_CLOSE_WRITE
                     | InotifyMask.IN_CLOSE_NOWRITE | InotifyMask.IN_ATTRIB | InotifyMask.IN_MODIFY
                     | InotifyMask.IN_CREATE | InotifyMask.IN_MOVED_TO | InotifyMask.IN_ONLYDIR
                     | InotifyMask.IN_DONT_FOLLOW | InotifyMask.IN_EXCL_UNLINK)
#: The single-bit names counted in a summary (modifiers such as IN_ISDIR are counted too).
_COUNTED: Final = tuple(flag for flag in InotifyMask
                        if flag not in (InotifyMask.IN_ONLYDIR, InotifyMask.IN_DONT_FOLLOW,
                                        InotifyMask.IN_EXCL_UNLINK, InotifyMask.IN_MASK_ADD,
                                        InotifyMask.IN_ONESHOT))
_OPEN: Final = int(InotifyMask.IN_OPEN)
_SPECIAL: Final = int(InotifyMask.IN_Q_OVERFLOW | InotifyMask.IN_IGNORED | InotifyMask.IN_CREATE
                      | InotifyMask.IN_MOVED_TO)
#: How long the thread blocks in one read: the longest a stop request waits for it.
_POLL_MS: Final = 20


@attrs.frozen
class WatchEvent:
    """One inotify event, converted at the boundary: a path relative to the watched base."""

    timestamp_ns: int  #: ``time.monotonic_ns()`` when the watcher read it
    path: str          #: relative POSIX path of the entry ("." for a watched root itself)
    mask: InotifyMask
    cookie: int = 0

    @property
    def is_dir(self) -> bool:
        """Whether the event concerns a directory."""
        return bool(self.mask & InotifyMask.IN_ISDIR)


@attrs.frozen
class WatchSummary:
    """What a watcher saw: counts per kernel event name, de-duplicated opens, watches and overflows."""

    counts: tuple[tuple[str, int], ...]
    opens: int
    watches_added: int
    overflows: int
    first_ns: int | None
    last_ns: int | None

    def as_dict(self) -> dict[str, int]:
        """Event name -> count, the evidence's ``inotify`` object."""
        return dict(self.counts)


def mask_names(mask: int) -> list[str]:
    """The kernel names of the counted bits set in ``mask``."""
    return [flag.name or "" for flag in _COUNTED if mask & flag]


class Watcher(BackgroundLoop):
    """Recursive inotify watch over ``roots`` (directories below ``base``) on its own thread.

    Directories created or moved in later are watched as soon as their event is read; opens in them
    before that moment are invisible to inotify (the accounting reports that gap, it does not hide it).
    """

    def __init__(self, base: str | os.PathLike[str], roots: Sequence[str | os.PathLike[str]], *,
                 keep_recent: int = 10_000) -> None:
        # Imported on use: importing artifactkit never depends on inotify being there.
        inotify_simple = importlib.import_module("inotify_simple")
        self.base = os.path.realpath(base)
        self._roots = [os.path.realpath(r) for r in roots]
        self._inotify = inotify_simple.INotify()
        self._paths: dict[int, str] = {}
        self._root_wds: set[int] = set()
        self._masks: collections.Counter[int] = collections.Counter()
        self._opens = 0
        self._overflows = 0
        self._added = 0
        self._first: int | None = None
        self._last: int | None = None
        self._recent: collections.deque[tuple[int, str | None, str, int, int]] = collections.deque(
            maxlen=keep_recent)
        self._lock = threading.Lock()
        for root in self._roots:
            wd = self._add_tree(root, initial=True)
            if wd is not None:
                self._root_wds.add(wd)
        self._start("artifactkit-watcher")

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.base).replace(os.sep, "/")

    def _add_tree(self, top: str, *, initial: bool = False) -> int | None:
        """Watch ``top`` and every directory below it; return ``top``'s watch descriptor.

        A directory that appears while we run is watched *before* it is listed, so nothing created
        in it meanwhile escapes (that listing is an open we make, traced as ours). The initial
        trees are quiet: there each directory is listed before it is watched, so the watcher's
        own start-up raises no events at all.
        """
        wd = None if initial else self._watch(top)
        try:
            # Listed through an O_NOATIME fd: an ordinary listing would move the directory's atime,
            # and the watcher would cause the very drift it is there to explain.
            with opened_dir(top, noatime=True) as fd:
                subdirs = [entry.name for entry in os.scandir(fd) if entry.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return wd
        for name in subdirs:
            self._add_tree(os.path.join(top, name), initial=initial)
        return self._watch(top) if initial else wd

    def _watch(self, top: str) -> int | None:
        try:
            wd: int = self._inotify.add_watch(top, WATCH_MASK)
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone again before we got to it: nothing left to watch
        if wd not in self._paths:
            self._added += 1
        self._paths[wd] = top
        return wd

    def _step(self) -> None:
        self._handle(self._inotify.read(timeout=_POLL_MS))

    def _finish(self) -> None:
        while batch := self._inotify.read(timeout=0):
            self._handle(batch)

    def _handle(self, batch: Iterable[Any]) -> None:
        # Hot path (tens of thousands of events a second under competing readers): count raw
        # masks and keep raw tuples; names and relative paths are made when someone asks.
        now = time.monotonic_ns()
        with self._lock:
            if self._first is None:
                self._first = now
            self._last = now
            for raw in batch:
                mask = raw.mask
                self._masks[mask] += 1
                # A directory's open reaches both its parent's watch (with a name) and its own
                # (without): count the child event, and self events only for the roots.
                if mask & _OPEN and (raw.name or raw.wd in self._root_wds):
                    self._opens += 1
                if mask & _SPECIAL:
                    self._special(raw.wd, raw.name, mask)
                self._recent.append((now, self._paths.get(raw.wd), raw.name, mask, raw.cookie))

    def _special(self, wd: int, name: str, mask: int) -> None:
        if mask & InotifyMask.IN_Q_OVERFLOW:
            self._overflows += 1
        elif mask & InotifyMask.IN_IGNORED:
            self._paths.pop(wd, None)
        elif mask & InotifyMask.IN_ISDIR and wd in self._paths:
            self._add_tree(os.path.join(self._paths[wd], name))  # a new or moved-in directory

    def recent(self) -> list[WatchEvent]:
        """The most recent events (bounded), oldest first, converted to :class:`WatchEvent`."""
        with self._lock:
            raw = list(self._recent)
        return [WatchEvent(now, self._rel(os.path.join(where, name) if name else where), InotifyMask(mask), cookie)
                for now, where, name, mask, cookie in raw if where is not None]

    def summary(self) -> WatchSummary:
        """Counts so far (final once :meth:`stop` returned)."""
        with self._lock:
            counts: collections.Counter[str] = collections.Counter()
            for mask, count in self._masks.items():
                for name in mask_names(mask):
                    counts[name] += count
            return WatchSummary(tuple(sorted(counts.items())), self._opens, self._added,
                                self._overflows, self._first, self._last)

    def stop(self) -> WatchSummary:
        """Stop the thread after draining the queue, close the inotify fd; return the summary."""
        self._halt()
        self._inotify.close()
        self._raise_if_failed("inotify watcher")
        return self.summary()


# -- this process's own opens --------------------------------------------------------------------

_TRACERS: list[SelfOpenTracer] = []
_HOOK_INSTALLED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Audit hooks cannot be removed: one permanent hook dispatches to whichever tracers are active.
    if _TRACERS and event in ("open", "os.scandir", "os.listdir"):
        for tracer in _TRACERS:
            tracer.record(event, args)


class SelfOpenTracer:
    """Count this process's opens (any thread) of paths under ``roots`` via ``sys.addaudithook``.

    Relative paths are counted as inside: while a cycle runs, this process opens relative names only
    through directory fds in its own work tree (store staging, restore, ``rmtree``); the audit event
    does not carry the ``dir_fd``. Listing an already open fd is not an open and is not counted.
    """

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        self._inside = PathSet(roots)
        self._lock = threading.Lock()
        self.opens = 0

    def record(self, event: str, args: tuple[Any, ...]) -> None:
        path = args[0] if args else None
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return  # an fd: open(fd) and listdir(fd) open nothing new
        if event == "open" and len(args) > 2 and isinstance(args[2], int) and args[2] & getattr(os, "O_PATH", 0):
            return  # O_PATH opens raise no inotify event
        inside = not os.path.isabs(path) or path in self._inside
        if inside:
            with self._lock:
                self.opens += 1

    def __enter__(self) -> SelfOpenTracer:
        global _HOOK_INSTALLED  # noqa: PLW0603 - one process-wide hook by nature
        if not _HOOK_INSTALLED:
            sys.addaudithook(_audit)
            _HOOK_INSTALLED = True
        _TRACERS.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self in _TRACERS:
            _TRACERS.remove(self)


@attrs.frozen
class AccessSplit:
    """Accesses (opens) split by who explains them. ``unexplained`` is a lower bound with inotify:
    opens missed before a new directory's watch existed, or merged by the kernel, shrink ``observed``."""

    observed: int
    self_opens: int
    reader_opens: int
    unexplained: int
    unobserved: int


def split_accesses(observed: int, self_opens: int, reader_opens: int) -> AccessSplit:
    """Reconcile inotify's count with the traced ones: what nobody claims is unexplained."""
    explained = self_opens + reader_opens
    return AccessSplit(observed, self_opens, reader_opens, unexplained=max(0, observed - explained),
                       unobserved=max(0, explained - observed))

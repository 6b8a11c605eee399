"""Which files of a tree were opened, as the kernel reports it (inotify ``IN_OPEN``): the same on every engine.

A publish reads a file's content only through an open of it (the scan ``lstat``s, lists xattrs by path and
reads link targets, none of which opens the file), so the regular files opened under a source are the files
whose content was read, whichever engine read them and on whichever thread. Counting the kernel's events,
not a Python function's calls, is what lets the stat cache's tests run on the native core too.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path

from inotify_simple import INotify, flags

from artifactkit._syscalls import open_noatime


class OpenedFiles:
    """Opens of regular files under the trees :meth:`watch` was given; :meth:`take` hands them over."""

    def __init__(self) -> None:
        self._inotify = INotify(nonblocking=True)
        self._dirs: dict[int, str] = {}

    def watch(self, root: Path) -> OpenedFiles:
        """Watch every directory under ``root`` as it is now (a directory made later is not watched)."""
        for rel in _directories(root):
            # ONLYDIR: a watch is only ever on a directory; its children's opens come with their names.
            self._dirs[self._inotify.add_watch(root / rel, flags.OPEN | flags.ONLYDIR)] = rel
        self.take()  # the listing's own opens of the directories (filtered anyway)
        return self

    def take(self) -> list[str]:
        """The files opened since the last call, by path relative to their watched root as it was when
        watched (a directory renamed since keeps its old name here), sorted; a file opened twice is there twice."""
        opened = []
        while events := list(self._inotify.read(timeout=0)):
            for event in events:
                if event.mask & flags.Q_OVERFLOW:
                    raise AssertionError("the inotify queue overflowed: opens were lost, the count means nothing")
                if event.mask & flags.ISDIR or not event.name or event.wd not in self._dirs:
                    continue
                opened.append(posixpath.normpath(posixpath.join(self._dirs[event.wd], event.name)))
        return sorted(opened)

    def close(self) -> None:
        self._inotify.close()


@contextlib.contextmanager
def files_opened(root: Path) -> Iterator[OpenedFiles]:
    """:class:`OpenedFiles` watching ``root`` for the block, closed after it."""
    opened = OpenedFiles().watch(root)
    try:
        yield opened
    finally:
        opened.close()


def _directories(root: Path) -> list[str]:
    """Every directory under ``root`` (relative, "" for itself), listed through ``O_NOATIME`` fds: watching a
    tree must not move its directories' atimes, which its publishes record."""
    found, todo = [], [""]
    while todo:
        rel = todo.pop()
        found.append(rel)
        fd, _ = open_noatime(os.path.join(root, rel), os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(fd) as listing:
                todo.extend(posixpath.join(rel, e.name) for e in listing if e.is_dir(follow_symlinks=False))
        finally:
            os.close(fd)
    return found

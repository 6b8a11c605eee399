"""What the kit saw of the copy itself: which inodes were read while the copier ran, and when each entry was born.

An atime shortly past the copy's ctime is either a read after the copier set the time or the copier setting it
to its own "now" (``utime(now, mtime)``): a fine clock read just before the ``utime`` lies up to one tick past the
coarse ctime that call stamps. The times alone cannot tell them apart; a read event on the inode can. So while the
copier runs, a fanotify notification group (CAP_SYS_ADMIN) marks the destination's mount for reads
(``FAN_ACCESS``, and ``FAN_CLOSE_NOWRITE`` for a read-only open, which an ``mmap`` read leaves as its only
trace) and keeps the device and inode of each event's file. An atime the copier never set is the inode's birth
stamp: the kernel gives a new inode one value for atime, mtime, ctime and btime, and ``statx`` reads btime back.

A symlink is *blind* here: ``readlink`` and following a link move its atime and raise no event. Without the
capability (or on a kernel without fanotify) nothing was watched, and the diagnoses stay what the times alone say.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Final

import attrs

from artifactkit._fanotify import FAN_NOFD, FanMask, FanotifyUnavailable, mark_mount, open_group, parse
from artifactkit._syscalls import birth_time_ns
from artifactkit.metadata import drift as dx
from artifactkit.metadata.model import ROOT, FileMeta

#: Reads of files and directories (a listing is a read), and read-only opens (an ``mmap`` read raises no
#: FAN_ACCESS, only the open and close).
_READS: Final = FanMask.FAN_ACCESS | FanMask.FAN_CLOSE_NOWRITE | FanMask.FAN_ONDIR
_POLL_S: Final = 0.05


@attrs.frozen
class CopyEvidence:
    """Per path of the copy: ``reads`` (a :data:`~artifactkit.metadata.drift.READS` value, ``None`` where the copy
    was not watched) and ``btime_ns`` (``None`` where the filesystem keeps no birth time)."""

    reads: dict[str, str | None]
    btime_ns: dict[str, int | None]


class CopyReads:
    """The inodes read while the copier ran (``watched`` False when fanotify could not be used: ``why``)."""

    def __init__(self) -> None:
        self.inodes: set[tuple[int, int]] = set()
        self.watched = False
        self.why: str | None = None
        self.complete = True

    def evidence(self, dst: str, entries: Iterable[FileMeta]) -> CopyEvidence:
        """Each entry's read evidence and birth time, read with ``statx`` alone (nothing moves)."""
        reads: dict[str, str | None] = {}
        births: dict[str, int | None] = {}
        for meta in entries:
            full = dst if meta.path == ROOT else os.path.join(dst, meta.path)
            try:
                st = os.lstat(full)
                births[meta.path] = birth_time_ns(full)
            except OSError:
                reads[meta.path], births[meta.path] = None, None
                continue
            if not (self.watched and self.complete):
                reads[meta.path] = None
            elif meta.kind == "symlink":
                reads[meta.path] = dx.READS_BLIND
            else:
                reads[meta.path] = dx.READS_SEEN if (st.st_dev, st.st_ino) in self.inodes else dx.READS_NONE
        return CopyEvidence(reads, births)


@contextlib.contextmanager
def watch_reads(where: str) -> Iterator[CopyReads]:
    """Record every read on the mount holding ``where`` while the body runs (see the module docstring)."""
    found = CopyReads()
    try:
        group = open_group(permission=False)
    except FanotifyUnavailable as err:
        found.why = err.strerror or str(err)
        yield found
        return
    try:
        mark_mount(group, where, _READS)
    except FanotifyUnavailable as err:
        os.close(group)
        found.why = err.strerror or str(err)
        yield found
        return
    found.watched = True
    device = os.lstat(where).st_dev
    done = threading.Event()

    def drain() -> None:
        while True:
            try:
                buf = os.read(group, 65536)
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno != errno.EINTR:
                    found.complete = False  # an event we could not take: the evidence is partial
                    return
                continue
            for event in parse(buf):
                if event.mask & FanMask.FAN_Q_OVERFLOW or event.fd == FAN_NOFD:
                    found.complete = False
                    continue
                try:
                    st = os.fstat(event.fd)  # the kernel's own fd for the event: it raises no event
                finally:
                    os.close(event.fd)
                if st.st_dev == device:
                    found.inodes.add((st.st_dev, st.st_ino))

    def pump() -> None:
        while not done.wait(_POLL_S):
            drain()

    reader = threading.Thread(target=pump, name="artifactkit-copy-reads", daemon=True)
    reader.start()
    try:
        yield found
    finally:
        done.set()
        reader.join()
        drain()  # the events queued before the copier returned
        os.close(group)

"""Issue 50's copiers, importable as ``tests.support.faulty_copiers_round3:NAME``: each is
:func:`tests.support.faulty_copiers.exact` with one more way to fool the kit switched on."""

from __future__ import annotations

import os
import subprocess
import time

from artifactkit.engine.reference.scan import scan_tree
from artifactkit.metadata.times import deepest_first
from tests.support.faulty_copiers import NS, Bugs, copy_tree

TWO_S = 2 * NS


def refuses_hardlinks(src: str, dst: str) -> None:
    """Exits non-zero before creating ``dst`` on a tree holding a second name of an inode (an archiver that
    cannot store hard links); copies any other tree exactly."""
    if any(entry.hardlink is not None for entry in scan_tree(src, read_links=False).entries):
        subprocess.run(["sh", "-c", "echo 'refusing to archive a hard link' >&2; exit 5"], check=True,
                       capture_output=True, text=True)
    copy_tree(src, dst)


def links_to_the_source(src: str, dst: str) -> None:
    """``cp -al``: new directories with the source's modes and times, every other entry a hard link to the
    source's own inode (a link's too: ``link(2)`` does not follow it). Editing the copy edits the source."""
    entries = scan_tree(src, read_links=False).entries  # lstat and O_NOATIME listings: no source time moves
    os.mkdir(dst, 0o700)
    for entry in sorted(entries, key=lambda e: e.path):
        if entry.path == ".":
            continue
        if entry.kind == "dir":
            os.mkdir(os.path.join(dst, entry.path), 0o700)
        else:
            os.link(os.path.join(src, entry.path), os.path.join(dst, entry.path), follow_symlinks=False)
    by_path = {entry.path: entry for entry in entries}
    for path in deepest_first(e.path for e in entries if e.kind == "dir"):
        entry, full = by_path[path], os.path.join(dst, path)
        os.chmod(full, entry.mode)
        os.utime(full, ns=(entry.atime_ns, entry.mtime_ns))


def sets_atime_to_now(src: str, dst: str) -> None:
    """Exact mtimes; every atime set explicitly to the time of the copy (``utime(now, mtime)``), never read."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (time.time_ns(), st.st_mtime_ns)))


def floors_to_two_seconds(src: str, dst: str) -> None:
    """Times floored to an even second (FAT's 2-second mtime, zip's DOS time, 2-second time archives)."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (st.st_atime_ns // TWO_S * TWO_S, st.st_mtime_ns // TWO_S * TWO_S)))


def names_as_text(src: str, dst: str) -> None:
    """Exact copy, then names as a line-oriented text tool leaves them (a ``find | while read`` file list): a
    name with a newline is lost, bytes that are not UTF-8 become U+FFFD."""
    copy_tree(src, dst)
    for parent, dirs, files in os.walk(os.fsencode(dst), topdown=False):
        for name in (*dirs, *files):
            path = os.path.join(parent, name)
            if b"\n" in name:
                subprocess.run(["rm", "-rf", "--", path], check=True)
            elif (text := name.decode("utf-8", "replace").encode()) != name:
                os.rename(path, os.path.join(parent, text))


def sets_atime_to_now_after_a_stat(src: str, dst: str) -> None:
    """:func:`sets_atime_to_now`, with an ``lstat`` of each output first (a copier checking what it wrote): the
    kernel then stamps the ``utime``'s ctime from the fine clock, so the atime set lies just *before* ctime, where
    an atime never set lies too."""
    def times(st: os.stat_result, dst_path: str) -> tuple[int, int]:
        os.lstat(dst_path)
        return time.time_ns(), st.st_mtime_ns
    copy_tree(src, dst, Bugs(times=times))


def sets_atime_to_the_copy_second(src: str, dst: str) -> None:
    """Reads the source plainly (moving its atimes) and stores whole seconds: mtime floored, atime the copy's own
    second (an archiver that keeps no atime and extracts with ``now``). Its atimes share a second with the
    source's moved ones: a same-second match that says nothing of when the source's atime was recorded."""
    copy_tree(src, dst, Bugs(times=lambda st, _d: (time.time_ns() // NS * NS, st.st_mtime_ns // NS * NS),
                             noatime_reads=False))

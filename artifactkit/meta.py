"""File metadata as integers: capture with ``lstat`` only, restore with ``utime(ns=...)`` only.

A float timestamp loses 100-250 ns at today's epoch, so no float ever holds a time here.
"""

from __future__ import annotations

import os
import stat
from typing import Literal

import attrs

from artifactkit.diagnosis import CLAMPED, MICROSECOND_TRUNCATED, MILLISECOND_TRUNCATED, SECOND_TRUNCATED, classify_time
from artifactkit.errors import TimestampNotRepresentable, UnsupportedFileType

Kind = Literal["file", "dir", "symlink"]
KINDS: tuple[Kind, ...] = ("file", "dir", "symlink")

#: Diagnoses that mean the filesystem itself cannot hold a value (granularity or range).
UNREPRESENTABLE = frozenset({SECOND_TRUNCATED, MILLISECOND_TRUNCATED, MICROSECOND_TRUNCATED, CLAMPED})

#: Permission bits including setuid, setgid and sticky (the bits a restore must reproduce).
MODE_MASK = 0o7777


@attrs.frozen
class FileMeta:
    """The metadata artifactkit preserves for one entry of a tree.

    ``path`` is relative POSIX (``"."`` for the tree's root). ``ctime_ns`` is context for
    diagnosis only (a ctime cannot be restored): it never takes part in equality or comparison.
    """

    path: str
    kind: Kind
    mode: int
    mtime_ns: int
    atime_ns: int
    size: int = 0
    sha256: str | None = None
    target: str | None = None
    ctime_ns: int | None = attrs.field(default=None, eq=False, repr=False)


def kind_of(st_mode: int, path: str) -> Kind:
    """Map an ``st_mode`` to our kind, refusing FIFOs, sockets and devices."""
    if stat.S_ISREG(st_mode):
        return "file"
    if stat.S_ISDIR(st_mode):
        return "dir"
    if stat.S_ISLNK(st_mode):
        return "symlink"
    what = stat.filemode(st_mode)[0]
    names = {"p": "a FIFO", "s": "a socket", "c": "a character device", "b": "a block device"}
    raise UnsupportedFileType(
        f"{path!r} is {names.get(what, 'a special file')}; artifacts hold only files, directories "
        "and symlinks",
        path=path,
    )


def meta_from_stat(relpath: str, st: os.stat_result, *, sha256: str | None = None,
                   target: str | None = None) -> FileMeta:
    """Convert an ``os.stat_result`` (from ``lstat``) into a :class:`FileMeta` at the boundary."""
    kind = kind_of(st.st_mode, relpath)
    return FileMeta(
        path=relpath,
        kind=kind,
        mode=stat.S_IMODE(st.st_mode),
        size=st.st_size if kind == "file" else 0,
        mtime_ns=st.st_mtime_ns,
        atime_ns=st.st_atime_ns,
        sha256=sha256,
        target=target,
        ctime_ns=st.st_ctime_ns,
    )


def capture(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> FileMeta:
    """Capture one entry's metadata with ``lstat`` only: nothing here reads content or a link.

    ``root`` makes the recorded path relative to it (``"."`` for the root itself); content digests
    and link targets are filled in by callers *after* every capture, because reading moves atime.
    """
    full = os.fspath(path)
    st = os.lstat(full)
    relpath = full if root is None else os.path.relpath(full, os.fspath(root)).replace(os.sep, "/")
    return meta_from_stat(relpath, st)


def set_times_exact(path: str, *, atime_ns: int, mtime_ns: int, dir_fd: int | None = None,
                    follow_symlinks: bool = True) -> None:
    """Set both times with ``utime(ns=...)`` and read them back: the kernel clamps silently.

    Since Linux 5.4 an out-of-range value is clamped and a coarse filesystem truncates, both
    without an error, so the only honest restore is one that checks what was stored.
    """
    os.utime(path, ns=(atime_ns, mtime_ns), dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    st = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    check_times_stored(path, st, atime_ns=atime_ns, mtime_ns=mtime_ns)


# Granularities filesystems really have (ns): ntfs3 100 ns, exFAT 10 ms, FAT 2 s and a day for atime,
# besides the 1 us / 1 ms / 1 s the diagnosis names. A value truncated to one of these was not held.
_GRANULARITIES_NS = (100, 1_000, 1_000_000, 10_000_000, 1_000_000_000, 2_000_000_000, 86_400_000_000_000)


def unrepresentable(wanted: int, got: int, *, field: str, ctime_ns: int | None) -> str | None:
    """Why the filesystem could not hold ``wanted`` (``got`` is what it stored), or ``None``."""
    if wanted == got:
        return None
    verdict = classify_time(wanted, got, field=field, ctime_ns=ctime_ns)
    if verdict in UNREPRESENTABLE:
        return verdict
    for unit in _GRANULARITIES_NS:
        if got in (wanted // unit * unit, -((-wanted) // unit) * unit):
            return f"truncated to a {unit} ns granularity"
    return None


def raise_if_unrepresentable(path: str, st: os.stat_result, *, atime_ns: int, mtime_ns: int) -> None:
    """:class:`TimestampNotRepresentable` when ``st`` shows a time truncated or clamped by the filesystem."""
    for field, wanted, got in (("mtime_ns", mtime_ns, st.st_mtime_ns), ("atime_ns", atime_ns, st.st_atime_ns)):
        why = unrepresentable(wanted, got, field=field, ctime_ns=st.st_ctime_ns)
        if why is not None:
            raise TimestampNotRepresentable(
                f"{path!r}: the filesystem stored {field}={got} after being asked for {wanted} "
                f"(delta {got - wanted} ns, {why}): it cannot hold this value (too coarse or out of range)",
                path=path, field=field, expected=wanted, actual=got, diagnosis=why, ctime_ns=st.st_ctime_ns,
            )


def check_times_stored(path: str, st: os.stat_result, *, atime_ns: int, mtime_ns: int) -> None:
    """Raise when a stat taken right after ``utime`` shows other times than were set.

    A value truncated to a granularity or clamped to a range means the filesystem cannot hold it:
    :class:`TimestampNotRepresentable`. Anything else moved after being set — typically a concurrent
    read advancing atime between the ``utime`` and this stat — and is a
    :class:`MetadataMismatchError` at the ``restore`` stage with its diagnosis, not a claim about
    the filesystem.
    """
    if (st.st_atime_ns, st.st_mtime_ns) == (atime_ns, mtime_ns):
        return
    raise_if_unrepresentable(path, st, atime_ns=atime_ns, mtime_ns=mtime_ns)
    # check imports this module for FileMeta, so the assertion is imported where it is needed.
    from artifactkit.check import assert_metadata_equal  # noqa: PLC0415

    stored = meta_from_stat(path, st)
    wanted_meta = FileMeta(path=path, kind=stored.kind, mode=stored.mode, size=stored.size,
                           mtime_ns=mtime_ns, atime_ns=atime_ns)
    assert_metadata_equal(wanted_meta, stored, stage="restore", fields=("mtime_ns", "atime_ns"))

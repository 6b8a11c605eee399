"""Set times exactly and prove it: ``utime(ns=...)``, then a read-back that explains any difference.

Since Linux 5.4 an out-of-range value is clamped and a coarse filesystem truncates, both without an
error, so the only honest restore is one that checks what was stored. This module is the one copy of
that read-back (the corpus, the store's download and every caller of :func:`set_times_exact` use it)
and of the order directory times are set in (deepest first: creating or renaming a child moves its
parent's mtime).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from typing import Final

from artifactkit.errors import TimestampNotRepresentable
from artifactkit.metadata.drift import (
    CLAMPED,
    GRANULARITIES_NS,
    MICROSECOND_TRUNCATED,
    MILLISECOND_TRUNCATED,
    SECOND_TRUNCATED,
    classify_time,
)
from artifactkit.metadata.mismatch import TIME_FIELDS
from artifactkit.metadata.model import KIND_IFMT, ROOT, FileMeta, meta_from_stat

#: Diagnoses that mean the filesystem itself cannot hold a value (granularity or range).
UNREPRESENTABLE: Final = frozenset({SECOND_TRUNCATED, MILLISECOND_TRUNCATED, MICROSECOND_TRUNCATED, CLAMPED})

#: Fields :func:`verify_stored` compares by default: all that a restore sets and ``lstat`` shows.
STORED_FIELDS: Final = ("kind", "mode", "size", "mtime_ns", "atime_ns", "uid", "gid", "rdev")

_IFMT: Final = KIND_IFMT


def set_times_exact(path: str, *, atime_ns: int, mtime_ns: int, dir_fd: int | None = None,
                    follow_symlinks: bool = True) -> None:
    """Set both times with ``utime(ns=...)`` and read them back (see :func:`verify_stored`)."""
    os.utime(path, ns=(atime_ns, mtime_ns), dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    st = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    check_times_stored(path, st, atime_ns=atime_ns, mtime_ns=mtime_ns)


def unrepresentable(wanted: int, got: int, *, field: str, ctime_ns: int | None) -> str | None:
    """Why the filesystem could not hold ``wanted`` (``got`` is what it stored), or ``None``."""
    if wanted == got:
        return None
    verdict = classify_time(wanted, got, field=field, ctime_ns=ctime_ns)
    if verdict in UNREPRESENTABLE:
        return verdict
    for unit in GRANULARITIES_NS[1:]:
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


def _exact(entry: FileMeta, st: os.stat_result) -> bool:
    return (stat.S_IFMT(st.st_mode) == _IFMT[entry.kind] and stat.S_IMODE(st.st_mode) == entry.mode
            and st.st_mtime_ns == entry.mtime_ns and st.st_atime_ns == entry.atime_ns
            and (entry.kind != "file" or st.st_size == entry.size)
            and (entry.uid is None or (st.st_uid, st.st_gid) == (entry.uid, entry.gid))
            and (entry.rdev is None or (os.major(st.st_rdev), os.minor(st.st_rdev)) == entry.rdev))


def _times_exact(entry: FileMeta, st: os.stat_result) -> bool:
    return st.st_mtime_ns == entry.mtime_ns and st.st_atime_ns == entry.atime_ns


def verify_stored(pairs: Iterable[tuple[FileMeta, os.stat_result]], *, stage: str,
                  fields: Sequence[str] = STORED_FIELDS) -> None:
    """Exact equality of every pair (what was set, what ``lstat`` shows now), or the error explaining it.

    Only differences build metadata objects: a value the filesystem cannot hold raises
    :class:`TimestampNotRepresentable`; anything else moved after being set (typically a concurrent
    read advancing atime) and is reported by the one shared assertion listing *every* differing entry
    and field, at ``stage``. ``fields`` is :data:`STORED_FIELDS` or :data:`TIME_FIELDS`.
    """
    exact = _exact if tuple(fields) == STORED_FIELDS else _times_exact  # decided once, not per entry
    wrong = [(entry, st) for entry, st in pairs if not exact(entry, st)]
    if not wrong:
        return
    for entry, st in wrong:
        raise_if_unrepresentable(entry.path, st, atime_ns=entry.atime_ns, mtime_ns=entry.mtime_ns)
    # Only a mismatch needs the comparison modules: a download that finds none never pays for importing them.
    from artifactkit.metadata.compare import assert_metadata_equal  # noqa: PLC0415
    assert_metadata_equal([entry for entry, _ in wrong],
                          [meta_from_stat(entry.path, st, owners=entry.uid is not None) for entry, st in wrong],
                          stage=stage, fields=fields)


def check_times_stored(path: str, st: os.stat_result, *, atime_ns: int, mtime_ns: int) -> None:
    """Raise when a stat taken right after ``utime`` shows other times than were set (stage ``restore``)."""
    if (st.st_atime_ns, st.st_mtime_ns) == (atime_ns, mtime_ns):
        return
    stored = meta_from_stat(path, st)
    wanted = FileMeta(path=path, kind=stored.kind, mode=stored.mode, size=stored.size,
                      mtime_ns=mtime_ns, atime_ns=atime_ns)
    verify_stored([(wanted, st)], stage="restore", fields=TIME_FIELDS)


def depth(path: str) -> int:
    """How deep a tree path lies: the root ``"."`` is shallower than every top-level name."""
    return -1 if path == ROOT else path.count("/")


def shallowest_first(paths: Iterable[str]) -> list[str]:
    """Directories in creation order: every parent before its children.

    Plain string order is not enough: a top-level name starting with ' ', '-', '+' ... sorts
    before the root's ".".
    """
    return sorted(paths, key=lambda p: (depth(p), p))


def deepest_first(paths: Iterable[str]) -> list[str]:
    """Directories in the order their times are set: children before parents, the root last."""
    return sorted(paths, key=lambda p: (-depth(p), p))

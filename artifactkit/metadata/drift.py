"""Explain *how* a timestamp came out wrong, from the two integers and a little context.

The classifier is a flat decision list; order matters and is part of the contract:
exact match, then clamping to a range edge, seconds wrapped modulo 2**32, truncation (coarsest unit
that explains the value first: s, ms, us, 100 ns), float round trips, an atime the copier recorded from
the source *after* its own read had moved it, an atime that was given the entry's mtime (also
floored), a 2 s floor, and finally a move forward (a later read) or a value that dates from the copy rather than
from the source.

One value alone cannot always tell these apart (a 100 ns floor of ``...000000001`` is a whole second;
"atime := floored mtime" is a second truncation when both share a second), so
:func:`uniform_diagnoses` names a whole tree's differences by the one systematic explanation that
covers them all, where there is one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import attrs

NS_PER_S: Final = 1_000_000_000

SECOND_TRUNCATED: Final = "second-truncated"
#: Floored to an even second: FAT's mtime, zip's DOS time, 2-second time archives.
TWO_SECOND_TRUNCATED: Final = "2s-truncated"
MILLISECOND_TRUNCATED: Final = "millisecond-truncated"
MICROSECOND_TRUNCATED: Final = "microsecond-truncated"
FLOAT_ROUNDED: Final = "float-rounded"
ADVANCED_BY_READ: Final = "advanced-by-read"
OMITTED: Final = "omitted"
CLAMPED: Final = "clamped"
SET_TO_MTIME: Final = "set-to-mtime"
HUNDRED_NS_TRUNCATED: Final = "100ns-truncated"
WRAPPED: Final = "wrapped"
READ_BEFORE_RECORDED: Final = "read-before-recorded"
SPARSE_COARSENED: Final = "sparse-coarsened"
DIFFERS: Final = "differs"
MODE_DIFFERS: Final = "mode-differs"
KIND_DIFFERS: Final = "kind-differs"
#: A device node of the right kind that names another device (major/minor): a copier that re-made it wrong.
RDEV_DIFFERS: Final = "rdev-differs"
CONTENT_DIFFERS: Final = "content-differs"
MISSING: Final = "missing"
UNEXPECTED: Final = "unexpected"
OWNER_DIFFERS: Final = "owner-differs"
XATTR_MISSING: Final = "xattr-missing"
XATTR_DIFFERS: Final = "xattr-differs"
XATTR_UNEXPECTED: Final = "xattr-unexpected"
HARDLINK_SPLIT: Final = "hardlink-split"
HARDLINK_JOINED: Final = "hardlink-joined"
SPARSE_FILLED: Final = "sparse-filled"
FLAGS_DIFFER: Final = "flags-differ"
#: A destination entry that is the source's own inode (same device and inode): a hard link, not a copy.
SHARES_SOURCE_INODE: Final = "shares-source-inode"

#: The one table of timestamp granularities (ns), finest first: what a probe tries and what a
#: stored value may have been truncated to. Filesystems really have 1 ns (ext4, xfs, tmpfs, btrfs),
#: 100 ns (ntfs3), 1 us, 1 ms, 10 ms (exFAT), 1 s (ext4 -I 128, many archives), 2 s (FAT) and a
#: whole day (FAT's atime).
GRANULARITIES_NS: Final = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000,
                           NS_PER_S, 2 * NS_PER_S, 86_400 * NS_PER_S)

#: The granularities with a diagnosis of their own, coarsest first (the coarsest explanation wins), except
#: that 2 s comes after 1 s: a value on an even second fits both, and says nothing of a 2 s floor. One value
#: alone is named 2 s only after every other explanation (:func:`classify_case`).
_TRUNCATION_UNITS: Final = (
    (NS_PER_S, SECOND_TRUNCATED),
    # After the whole second: an even second fits both, and only an odd source second shows the 2 s floor.
    (2 * NS_PER_S, TWO_SECOND_TRUNCATED),
    (1_000_000, MILLISECOND_TRUNCATED),
    (1_000, MICROSECOND_TRUNCATED),
    (100, HUNDRED_NS_TRUNCATED),  # Windows FILETIME, 7-Zip, ntfs3: 100 ns ticks
)

# Whole-second range edges a value gets clamped to, as (floors, ceilings): a clamped value lands on
# one of them *from outside* the range. Filesystems (kernel sources, s_time_min / s_time_max): 32-bit
# signed (ext4 -I 128, xfs without bigtime), ext4's 34-bit extra epoch, xfs bigtime, unsigned 32-bit.
# Tools: borg 1.2's safe_s/safe_ns clamp to 0 ... MAX_S = 2**31-1 minus 48 h ("to avoid any issues
# that could be caused by tz calculations", borg/helpers/time.py; seen: 2100-01-01 restored as
# 2147310847), its 64-bit MAX_NS likewise 48 h short of 2**63-1 ns; zip's DOS time runs 1980-01-01 to
# 2107-12-31T23:59:58 (seen: a 1966 mtime unzipped as 315532800).
_HOURS_48_NS: Final = 48 * 3600 * NS_PER_S
_CLAMP_FLOORS_S: Final = frozenset({
    -(2**31),                  # S32_MIN: also ext4's and xfs bigtime's minimum
    0,                         # the epoch: unsigned seconds, borg's lower clamp
    315_532_800,               # 1980-01-01T00:00:00Z, the DOS (zip) epoch
})
_CLAMP_CEILINGS_S: Final = frozenset({
    2**31 - 1,                 # S32_MAX: ext4 -I 128, xfs without bigtime (2038-01-19)
    2**31 - 1 - 48 * 3600,     # borg's MAX_S (2038-01-17T03:14:07)
    (2**63 - 1 - _HOURS_48_NS) // NS_PER_S,  # borg's MAX_NS on 64-bit-only builds (2262)
    2**32 - 1,                 # unsigned 32-bit seconds (2106-02-07)
    2**34 - 1 - 2**31,         # EXT4_EXTRA_TIMESTAMP_MAX (2446-05-10)
    16299260424,               # XFS_BIGTIME_TIME_MAX (2486-07-02)
    4_354_819_198,             # 2107-12-31T23:59:58Z, the end of DOS time
})

# A restored value that dates from the copy itself sits shortly before the entry's ctime: the copy
# created the inode, then set the other time (utime sets ctime to now). An hour is generous for any
# single copy and far below the gap between a historical value and today.
_COPY_WINDOW_NS: Final = 3600 * NS_PER_S


def truncations(value_ns: int, unit_ns: int) -> set[int]:
    """Both ways a copier truncates: toward -inf (the kernel) and toward zero (``int()``)."""
    floor = (value_ns // unit_ns) * unit_ns
    toward_zero = -((-value_ns) // unit_ns) * unit_ns if value_ns < 0 else floor
    return {floor, toward_zero}


def float_round_trips(value_ns: int) -> set[int]:
    """Every value a float-seconds round trip commonly produces for ``value_ns``.

    Covers ``st_atime`` (CPython builds it as ``sec + nsec * 1e-9``), ``ns / 1e9``, and the ways
    back to ns: ``os.utime(times=...)`` floors the fraction, others ``int()``/``round()`` ``x * 1e9``.
    """
    sec, nsec = divmod(value_ns, NS_PER_S)
    as_float = {sec + nsec * 1e-9, value_ns / NS_PER_S}
    results: set[int] = set()
    for seconds in as_float:
        frac, whole = math.modf(seconds)
        scaled_frac = frac * 1e9
        for rounder in (math.floor, math.ceil, round):
            # os.utime: whole seconds kept exactly, fraction scaled then rounded (floor for utime).
            results.add(int(whole) * NS_PER_S + int(rounder(scaled_frac)))
            results.add(int(rounder(seconds * 1e9)))
    return results


#: The ends of a signed 64-bit count of ns (1677-09-21 and 2262-04-11): a tool keeping times as ``i64`` ns
#: clamps there, off the whole second, where xfs bigtime, btrfs and tmpfs hold far more.
_I64_NS_EDGES: Final = (-(2**63), 2**63 - 1)


def is_clamped(expected_ns: int, actual_ns: int) -> bool:
    """Whether ``actual_ns`` is a range edge that ``expected_ns`` lies beyond (by at least a second)."""
    if abs(actual_ns - expected_ns) < NS_PER_S:
        return False
    if actual_ns in _I64_NS_EDGES:
        return (expected_ns > actual_ns) == (actual_ns > 0)
    if actual_ns % NS_PER_S:
        return False
    edge = actual_ns // NS_PER_S
    return (edge in _CLAMP_CEILINGS_S and expected_ns > actual_ns) or (
        edge in _CLAMP_FLOORS_S and expected_ns < actual_ns)


def is_wrapped(expected_ns: int, actual_ns: int) -> bool:
    """Whether the whole seconds moved by a non-zero multiple of 2**32, the fraction kept or dropped.

    A ``uint32`` of seconds turns 1966 into 2102, an ``int32`` turns 2100 into 1963 (both seen in archive
    formats with 32-bit time fields); either way the distance is whole turns of 2**32 seconds.
    """
    seconds, frac = divmod(actual_ns, NS_PER_S)
    toward_zero = -((-expected_ns) // NS_PER_S) if expected_ns < 0 else expected_ns // NS_PER_S
    for source_seconds in {expected_ns // NS_PER_S, toward_zero}:
        turns, rest = divmod(seconds - source_seconds, 2**32)
        if turns and not rest and frac in (0, expected_ns - source_seconds * NS_PER_S):
            return True
    return False


def _floors(value_ns: int) -> set[int]:
    """``value_ns`` and every truncation of it to a granularity a tool or filesystem really has."""
    return {value_ns}.union(*(truncations(value_ns, unit) for unit in GRANULARITIES_NS[1:]))


def _from_the_copy(actual_ns: int, ctime_ns: int | None) -> bool:
    return ctime_ns is not None and ctime_ns - _COPY_WINDOW_NS <= actual_ns <= ctime_ns


@attrs.frozen
class TimeCase:
    """One timestamp to explain, with its context: the actual entry's ctime and mtime, the supplied mtime,
    and (conformance only) the source's value of this field after the copy."""

    expected_ns: int
    actual_ns: int
    field: str
    ctime_ns: int | None = None
    mtime_ns: int | None = None
    expected_mtime_ns: int | None = None
    source_after_ns: int | None = None


def _given_mtime(case: TimeCase) -> bool:
    # restic, borg without --atime, tarfile, zip: no atime in the archive, so the restore sets the mtime
    # (as stored: floored to its unit) into atime too; a directory's mtime then moves on as children
    # are written, so the supplied mtime counts as well as the actual one.
    mtimes = [m for m in (case.mtime_ns, case.expected_mtime_ns) if m is not None]
    return (case.field == "atime_ns" and any(case.actual_ns in _floors(m) for m in mtimes)
            and not _from_the_copy(case.actual_ns, case.ctime_ns))


def _recorded_after_read(case: TimeCase) -> bool:
    # The copier read the source (moving its atime) and only then recorded it: the copy holds the source's
    # moved value (or that value in the archive's unit), and the source kept it.
    # Only for an entry whose mtime was restored: a copier that sets no time leaves the inode's creation time,
    # and on a coarse clock a copy made within one tick of the source's read equals it by coincidence
    # (zipfile's directories did).
    after = case.source_after_ns
    if case.field != "atime_ns" or after is None or after == case.expected_ns or not _mtime_restored(case):
        return False
    return case.actual_ns == after or any(case.actual_ns in truncations(after, unit) for unit, _ in _TRUNCATION_UNITS)


def _mtime_restored(case: TimeCase) -> bool:
    mtime, wanted = case.mtime_ns, case.expected_mtime_ns
    if mtime is None or wanted is None:
        return False
    return mtime in _floors(wanted) or mtime in float_round_trips(wanted) or is_clamped(wanted, mtime)


def _float_rounded(case: TimeCase) -> bool:
    return abs(case.actual_ns - case.expected_ns) < 10_000 and case.actual_ns in float_round_trips(case.expected_ns)


def classify_case(case: TimeCase) -> str | None:
    """:func:`classify_time` of one :class:`TimeCase`."""
    expected_ns, actual_ns, ctime_ns = case.expected_ns, case.actual_ns, case.ctime_ns
    if expected_ns == actual_ns:
        return None
    if is_clamped(expected_ns, actual_ns):
        return CLAMPED
    if is_wrapped(expected_ns, actual_ns):
        # Before the read test: a 1966 atime wrapped into 2102 lies past ctime, yet no read moved it.
        return WRAPPED
    for unit, name in _TRUNCATION_UNITS:
        if name != TWO_SECOND_TRUNCATED and actual_ns in truncations(expected_ns, unit):
            return name
    if _float_rounded(case):
        return FLOAT_ROUNDED
    if _recorded_after_read(case):
        return READ_BEFORE_RECORDED
    if _given_mtime(case):
        # Before the read test: a post-2038 mtime copied into atime lies past ctime, yet no read moved it.
        return SET_TO_MTIME
    if actual_ns in truncations(expected_ns, 2 * NS_PER_S):
        # After atime := mtime: an even second below an odd one is also where a whole-second mtime can sit.
        return TWO_SECOND_TRUNCATED
    if ctime_ns is not None:
        if case.field == "atime_ns" and actual_ns > ctime_ns:
            # Only a read moves atime past the last metadata change: utime() sets ctime to now.
            return ADVANCED_BY_READ
        if _from_the_copy(actual_ns, ctime_ns):
            return OMITTED
    return DIFFERS


def classify_time(expected_ns: int, actual_ns: int, *, field: str, ctime_ns: int | None,
                  mtime_ns: int | None = None, expected_mtime_ns: int | None = None,
                  source_after_ns: int | None = None) -> str | None:
    """Name what happened to a timestamp, or ``None`` when it is exact.

    ``ctime_ns`` and ``mtime_ns`` are the *actual* entry's ctime and mtime, ``expected_mtime_ns`` the
    supplied mtime (context, never compared): an atime equal to either mtime, or to either floored to a
    granularity, was given that value. ``source_after_ns`` is the source's value of this field after the
    copy, where one is known: an atime equal to it, when it moved, was recorded after the copier's read.
    """
    return classify_case(TimeCase(expected_ns, actual_ns, field, ctime_ns, mtime_ns, expected_mtime_ns,
                                  source_after_ns))


#: The explanations of a tree's differences that are one rule applied to every entry, coarsest first:
#: where one value fits several, the one that fits every difference of the field names them all.
_TRUNCATIONS: Final = frozenset(name for _, name in _TRUNCATION_UNITS)
_SYSTEMATIC: Final = (*(name for _, name in _TRUNCATION_UNITS), FLOAT_ROUNDED, SET_TO_MTIME)


def _explains(name: str, case: TimeCase) -> bool:
    if name == FLOAT_ROUNDED:
        return _float_rounded(case)
    if name == SET_TO_MTIME:
        return _given_mtime(case)
    unit = next(unit for unit, unit_name in _TRUNCATION_UNITS if unit_name == name)
    return case.actual_ns in truncations(case.expected_ns, unit)


def uniform_diagnoses(cases: Sequence[TimeCase], rivals: dict[int, tuple[str, ...]] | None = None) -> list[str | None]:
    """:func:`classify_case` of each case, then per field the systematic differences (truncations, float
    round trips, set-to-mtime) named by the first systematic explanation that covers all of them and that
    some difference of the tree shows by itself (even-second floors alone never name a 2 s floor).

    A copier applies one rule to a whole tree: a uniform 100 ns floor turns ``...000000001`` into a whole
    second too, and is still a 100 ns floor. Where no one rule covers them, each keeps its own name. Where
    a truncation and atime := floored mtime both cover every atime difference (each shares its second with
    its mtime), the evidence fits neither better: ``differs``, with both values (and both names in ``rivals``,
    by index, for a caller that knows more: the same copier on another tree).
    """
    found = [classify_case(case) for case in cases]
    shown = set(found)
    for field in sorted({case.field for case in cases}):
        group = [i for i, case in enumerate(cases) if case.field == field and found[i] in _SYSTEMATIC]
        for name in _SYSTEMATIC:
            # A rule some difference of the tree shows by itself: even-second 1 s floors never make a tree "2 s".
            if group and name in shown and all(_explains(name, cases[i]) for i in group):
                # A truncation that atime := mtime (floored) explains as well, in every difference: each atime
                # shares its second with its mtime, and nothing here says which rule the copier applied.
                rival = name in _TRUNCATIONS and all(_explains(SET_TO_MTIME, cases[i]) for i in group)
                for i in group:
                    found[i] = DIFFERS if rival else name
                    if rival and rivals is not None:
                        rivals[i] = (name, SET_TO_MTIME)
                break
    return found

"""Explain *how* a timestamp came out wrong, from the two integers and a little context.

The classifier is a flat decision list; order matters and is part of the contract:
exact match, then clamping to a filesystem's range, truncation (coarsest unit that explains the
value first), float round trips, and finally a move forward (a later read) or a value that dates
from the copy rather than from the source.
"""

from __future__ import annotations

import math
from typing import Final

NS_PER_S: Final = 1_000_000_000

SECOND_TRUNCATED: Final = "second-truncated"
MILLISECOND_TRUNCATED: Final = "millisecond-truncated"
MICROSECOND_TRUNCATED: Final = "microsecond-truncated"
FLOAT_ROUNDED: Final = "float-rounded"
ADVANCED_BY_READ: Final = "advanced-by-read"
OMITTED: Final = "omitted"
CLAMPED: Final = "clamped"
DIFFERS: Final = "differs"
MODE_DIFFERS: Final = "mode-differs"
KIND_DIFFERS: Final = "kind-differs"
CONTENT_DIFFERS: Final = "content-differs"
MISSING: Final = "missing"
UNEXPECTED: Final = "unexpected"

#: The one table of timestamp granularities (ns), finest first: what a probe tries and what a
#: stored value may have been truncated to. Filesystems really have 1 ns (ext4, xfs, tmpfs, btrfs),
#: 100 ns (ntfs3), 1 us, 1 ms, 10 ms (exFAT), 1 s (ext4 -I 128, many archives), 2 s (FAT) and a
#: whole day (FAT's atime).
GRANULARITIES_NS: Final = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000,
                           NS_PER_S, 2 * NS_PER_S, 86_400 * NS_PER_S)

#: The granularities with a diagnosis of their own, coarsest first (the coarsest explanation wins).
_TRUNCATION_UNITS: Final = (
    (NS_PER_S, SECOND_TRUNCATED),
    (1_000_000, MILLISECOND_TRUNCATED),
    (1_000, MICROSECOND_TRUNCATED),
)

# Whole-second limits filesystems clamp to (kernel sources, s_time_min / s_time_max):
# 32-bit signed (ext4 -I 128, xfs without bigtime, many others), ext4's 34-bit extra epoch,
# xfs bigtime, and unsigned 32-bit (e.g. ext2/hfs style) — a clamped value lands on one of these.
_CLAMP_LIMITS_S: Final = frozenset({
    -(2**31),              # S32_MIN: also ext4's and xfs bigtime's minimum
    2**31 - 1,             # S32_MAX: ext4 -I 128, xfs without bigtime (2038-01-19)
    2**34 - 1 - 2**31,     # EXT4_EXTRA_TIMESTAMP_MAX (2446-05-10)
    16299260424,           # XFS_BIGTIME_TIME_MAX (2486-07-02)
    2**32 - 1, 0,          # unsigned 32-bit seconds (2106 / the epoch)
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


def classify_time(expected_ns: int, actual_ns: int, *, field: str, ctime_ns: int | None) -> str | None:
    """Name what happened to a timestamp, or ``None`` when it is exact."""
    if expected_ns == actual_ns:
        return None
    delta = actual_ns - expected_ns
    if actual_ns % NS_PER_S == 0 and abs(delta) >= NS_PER_S and actual_ns // NS_PER_S in _CLAMP_LIMITS_S:
        outward = (delta < 0 and actual_ns > 0) or (delta > 0 and actual_ns <= 0)
        if outward:
            return CLAMPED
    for unit, name in _TRUNCATION_UNITS:
        if actual_ns in truncations(expected_ns, unit):
            return name
    if abs(delta) < 10_000 and actual_ns in float_round_trips(expected_ns):
        return FLOAT_ROUNDED
    if ctime_ns is not None:
        if field == "atime_ns" and actual_ns > ctime_ns:
            # Only a read moves atime past the last metadata change: utime() sets ctime to now.
            return ADVANCED_BY_READ
        if ctime_ns - _COPY_WINDOW_NS <= actual_ns <= ctime_ns:
            return OMITTED
    return DIFFERS

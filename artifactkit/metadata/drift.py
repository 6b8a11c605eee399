"""Explain *how* a timestamp came out wrong, from the two integers and a little context.

The classifier is a flat decision list; order matters and is part of the contract:
exact match, then clamping to a range edge, seconds wrapped modulo 2**32, truncation (coarsest unit
that explains the value first: s, ms, us, 100 ns), float round trips, an atime the copier recorded from
the source *after* its own read had moved it, an atime that was given the entry's mtime (also
floored), a 2 s floor, and finally a move forward (a later read), a value the copier set to its own "now", or one
that dates from the copy rather than from the source.

A name is given only where the evidence fits it better than every other; where two explanations fit alike the
value is ``differs`` (both values shown) and the candidates go to the caller as *rivals*, for a run that knows more
(the same copier elsewhere) to settle. Around the copy's ctime the times alone are ambiguous: a fine clock read
just before ``utime`` lies up to one tick past the coarse ctime it stamps, and a read in that tick lands there too.
Where the copy was watched (conformance, :mod:`artifactkit.conformance.copy_reads`), a read event on the inode and
its birth time decide; where it was not, the times alone say what they always said.

One value alone cannot always tell these apart (a 100 ns floor of ``...000000001`` is a whole second;
"atime := floored mtime" is a second truncation when both share a second), so
:func:`uniform_diagnoses` names a whole tree's differences by the one systematic explanation that
covers them all, where there is one.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from typing import Final

import attrs

from artifactkit.metadata.range_edges import NS_PER_S, is_clamped, is_wrapped

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
#: The copier set atime to its own clock (``utime(now, mtime)``): no read moved it, yet it is not the inode's birth.
SET_TO_COPY_TIME: Final = "set-to-copy-time"
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

#: What the kit saw of reads of an entry while the copier ran (``TimeCase.reads``; ``None``: nothing watched):
#: a read event on its inode, none on a watched inode, or a symlink, whose reads (``readlink``, following it)
#: raise no event.
READS_SEEN: Final = "seen"
READS_NONE: Final = "none"
READS_BLIND: Final = "blind"

#: CLOCK_REALTIME_COARSE (include/uapi/linux/time.h): the clock inode times are stamped from.
_CLOCK_REALTIME_COARSE: Final = 5


@functools.cache
def coarse_tick_ns() -> int:
    """One tick of the clock the kernel stamps inode times from (4 ms at HZ=250): how far a fine "now" taken
    before a ``utime`` can lie past the ctime that call stamps. 10 ms (HZ=100, the coarsest) where unknown."""
    try:
        return max(1, int(time.clock_getres(_CLOCK_REALTIME_COARSE) * NS_PER_S))
    except (OSError, AttributeError):
        return 10_000_000


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


def _floors(value_ns: int) -> set[int]:
    """``value_ns`` and every truncation of it to a granularity a tool or filesystem really has."""
    return {value_ns}.union(*(truncations(value_ns, unit) for unit in GRANULARITIES_NS[1:]))


def _from_the_copy(actual_ns: int, ctime_ns: int | None) -> bool:
    return ctime_ns is not None and ctime_ns - _COPY_WINDOW_NS <= actual_ns <= ctime_ns


@attrs.frozen
class TimeCase:
    """One timestamp to explain, with its context: the actual entry's ctime and mtime, the supplied mtime,
    and (conformance only) the source's value of this field after the copy, what the kit saw of reads of the
    entry during the copy (:data:`READS_SEEN`, :data:`READS_NONE`, :data:`READS_BLIND`) and its birth time."""

    expected_ns: int
    actual_ns: int
    field: str
    ctime_ns: int | None = None
    mtime_ns: int | None = None
    expected_mtime_ns: int | None = None
    source_after_ns: int | None = None
    reads: str | None = None
    btime_ns: int | None = None


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
    return case.actual_ns == after or _unit_of_match(case) is not None


def _unit_of_match(case: TimeCase) -> int | None:
    """The unit the copy's value is the source's moved value floored to, if it is one (and not that value)."""
    after = case.source_after_ns
    if after is None or case.actual_ns == after:
        return None
    return next((unit for unit, _ in _TRUNCATION_UNITS if case.actual_ns in truncations(after, unit)), None)


def _copy_time_fits_floored(case: TimeCase) -> bool:
    """Whether the copy's own time, floored to the unit the value matched the source in, gives it as well.

    The copier reads the source while it copies that entry, so the source's moved value and the copy's own
    time (from its birth to its last change) usually share a second: a same-second match is then no evidence
    that the source's value was recorded. Only where that span lies in another unit does the match say so.
    """
    unit, ctime = _unit_of_match(case), case.ctime_ns
    if unit is None or ctime is None:
        return False
    born = ctime if case.btime_ns is None else min(case.btime_ns, ctime)
    return case.actual_ns + unit > born and case.actual_ns <= ctime + coarse_tick_ns()


#: How far past ctime a "now" set just before the ``utime`` can lie, in ticks: the coarse clock lags the fine one
#: by a tick, more where the timekeeping tick itself comes late (4.01 ms seen at HZ=250 in a virtual machine).
_SET_REACH_TICKS: Final = 4


def _past_ctime(case: TimeCase) -> tuple[str, tuple[str, ...]]:
    """An atime past the last metadata change: a read moved it, or the copier set its own "now" there (a fine
    clock read just before ``utime`` lies past the coarse ctime that call stamps by the coarse clock's lag)."""
    assert case.ctime_ns is not None
    if case.reads is None or case.reads == READS_SEEN:
        return ADVANCED_BY_READ, ()  # unwatched: what the times alone say
    if case.reads == READS_NONE:
        return SET_TO_COPY_TIME, ()  # a watched file or directory no read touched: only a utime moved it
    if case.actual_ns > case.ctime_ns + _SET_REACH_TICKS * coarse_tick_ns():
        return ADVANCED_BY_READ, ()  # a symlink, whose reads raise no event: only a read reaches that far
    # Near ctime a symlink's value fits both. A copier sets a link's times as it sets its files': a run whose files
    # and directories show it setting "now" names the link so; else it stays a read (rclone's links, read back
    # after their times were set, checked by hand).
    return ADVANCED_BY_READ, (ADVANCED_BY_READ, SET_TO_COPY_TIME)


def _before_ctime(case: TimeCase) -> tuple[str, tuple[str, ...]]:
    """An atime from the copy, at or before its last metadata change: the inode's birth stamp (never set), or a
    value the copier set, or a read's (one before that change, or one in its tick)."""
    if case.reads is None or case.btime_ns is None or case.actual_ns == case.btime_ns:
        return OMITTED, ()  # unwatched: what the times alone say; or the very stamp the inode was born with
    if case.reads == READS_NONE:
        # Not its birth stamp, and no read moved it: only a utime did, to a time of the copy. Where the copier read
        # the source, that was likely one of the source's moved values, recorded after an earlier read than the
        # last (rclone stats a file while its threads read it, checked by hand); a run whose other entries show
        # "now" set names it so.
        source_moved = case.source_after_ns not in (None, case.expected_ns)
        if source_moved:
            return READ_BEFORE_RECORDED, (SET_TO_COPY_TIME, READ_BEFORE_RECORDED)
        return SET_TO_COPY_TIME, ()
    ties = (ADVANCED_BY_READ,) if case.actual_ns == case.ctime_ns else ()
    return DIFFERS, (OMITTED, SET_TO_COPY_TIME, *ties)


def _mtime_restored(case: TimeCase) -> bool:
    mtime, wanted = case.mtime_ns, case.expected_mtime_ns
    if mtime is None or wanted is None:
        return False
    return mtime in _floors(wanted) or mtime in float_round_trips(wanted) or is_clamped(wanted, mtime)


def _float_rounded(case: TimeCase) -> bool:
    return abs(case.actual_ns - case.expected_ns) < 10_000 and case.actual_ns in float_round_trips(case.expected_ns)


def classify_case(case: TimeCase) -> str | None:
    """:func:`classify_time` of one :class:`TimeCase`."""
    return explain_case(case)[0]


def explain_case(case: TimeCase) -> tuple[str | None, tuple[str, ...]]:
    """:func:`classify_case` with the rivals of a value several explanations fit alike (else ``()``): its name is
    then ``differs``, or, for an exact match with the source's moved value that is also the copy's birth stamp,
    ``read-before-recorded`` (a run that shows the same copier leaving atimes unset elsewhere says ``omitted``)."""
    name = _classify(case)
    if name != _AMBIGUOUS:
        return name, ()
    if _recorded_after_read(case):
        if case.actual_ns == case.source_after_ns:
            # The source's moved value to the ns, and the copy's own birth stamp: the source read and the copy made
            # in one clock tick. Named as recorded (what the exact match says) unless the run shows otherwise.
            return READ_BEFORE_RECORDED, (READ_BEFORE_RECORDED, OMITTED)
        return DIFFERS, (READ_BEFORE_RECORDED, SET_TO_COPY_TIME, OMITTED)  # a same-unit match, copy time too
    assert case.ctime_ns is not None
    return _past_ctime(case) if case.actual_ns > case.ctime_ns else _before_ctime(case)


#: :func:`_classify`'s answer where the copy's context decides (:func:`explain_case`).
_AMBIGUOUS: Final = "(context)"


def _classify(case: TimeCase) -> str | None:
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
        # A same-second match where the copy's own time shares that second says nothing of a read; nor does an
        # exact one that is also the copy's birth stamp (the source read and the copy made in one clock tick).
        born = case.btime_ns is not None and actual_ns == case.btime_ns
        return _AMBIGUOUS if born or _copy_time_fits_floored(case) else READ_BEFORE_RECORDED
    if _given_mtime(case):
        # Before the read test: a post-2038 mtime copied into atime lies past ctime, yet no read moved it.
        return SET_TO_MTIME
    if actual_ns in truncations(expected_ns, 2 * NS_PER_S):
        # After atime := mtime: an even second below an odd one is also where a whole-second mtime can sit.
        return TWO_SECOND_TRUNCATED
    if ctime_ns is not None:
        if case.field == "atime_ns" and (actual_ns > ctime_ns or _from_the_copy(actual_ns, ctime_ns)):
            # Past the last metadata change (utime() sets ctime to now) a read or a fine "now" moved it; before
            # it, the copy's own stamp or a value set: :func:`explain_case` weighs what the kit saw.
            return _AMBIGUOUS
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
    by index, for a caller that knows more: the same copier on another tree), as for every ``differs`` that
    :func:`explain_case` found several explanations for.
    """
    explained = [explain_case(case) for case in cases]
    found = [name for name, _ in explained]
    if rivals is not None:
        rivals.update({i: names for i, (_, names) in enumerate(explained) if names})
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

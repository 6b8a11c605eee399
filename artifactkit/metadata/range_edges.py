"""The ends of the time ranges filesystems and tools hold, and the two ways a value past one comes back: clamped
onto the edge, or wrapped by whole turns of 32-bit seconds."""

from __future__ import annotations

from typing import Final

NS_PER_S: Final = 1_000_000_000

# Whole-second range edges a value gets clamped to, as (floors, ceilings): a clamped value lands on
# one of them *from outside* the range. Filesystems (kernel sources, s_time_min / s_time_max): 32-bit
# signed (ext4 -I 128, xfs without bigtime), ext4's 34-bit extra epoch, xfs bigtime, unsigned 32-bit.
# Tools: borg 1.2's safe_s/safe_ns clamp to 0 ... MAX_S = 2**31-1 minus 48 h ("to avoid any issues
# that could be caused by tz calculations", borg/helpers/time.py; seen: 2100-01-01 restored as
# 2147310847), its 64-bit MAX_NS likewise 48 h short of 2**63-1 ns; zip's DOS time runs 1980-01-01 to
# 2107-12-31T23:59:58 (seen: a 1966 mtime unzipped as 315532800).
_HOURS_48_NS: Final = 48 * 3600 * NS_PER_S
CLAMP_FLOORS_S: Final = frozenset({
    -(2**31),                  # S32_MIN: also ext4's and xfs bigtime's minimum
    0,                         # the epoch: unsigned seconds, borg's lower clamp
    315_532_800,               # 1980-01-01T00:00:00Z, the DOS (zip) epoch
})
CLAMP_CEILINGS_S: Final = frozenset({
    2**31 - 1,                 # S32_MAX: ext4 -I 128, xfs without bigtime (2038-01-19)
    2**31 - 1 - 48 * 3600,     # borg's MAX_S (2038-01-17T03:14:07)
    (2**63 - 1 - _HOURS_48_NS) // NS_PER_S,  # borg's MAX_NS on 64-bit-only builds (2262)
    2**32 - 1,                 # unsigned 32-bit seconds (2106-02-07)
    2**34 - 1 - 2**31,         # EXT4_EXTRA_TIMESTAMP_MAX (2446-05-10)
    16299260424,               # XFS_BIGTIME_TIME_MAX (2486-07-02)
    4_354_819_198,             # 2107-12-31T23:59:58Z, the end of DOS time
})


#: The ends of a signed 64-bit count of ns (1677-09-21 and 2262-04-11): a tool keeping times as ``i64`` ns
#: clamps there, off the whole second, where xfs bigtime, btrfs and tmpfs hold far more.
I64_NS_EDGES: Final = (-(2**63), 2**63 - 1)


def is_clamped(expected_ns: int, actual_ns: int) -> bool:
    """Whether ``actual_ns`` is a range edge that ``expected_ns`` lies beyond (by at least a second)."""
    if abs(actual_ns - expected_ns) < NS_PER_S:
        return False
    if actual_ns in I64_NS_EDGES:
        return (expected_ns > actual_ns) == (actual_ns > 0)
    if actual_ns % NS_PER_S:
        return False
    edge = actual_ns // NS_PER_S
    return (edge in CLAMP_CEILINGS_S and expected_ns > actual_ns) or (
        edge in CLAMP_FLOORS_S and expected_ns < actual_ns)


def is_wrapped(expected_ns: int, actual_ns: int) -> bool:
    """Whether the whole seconds moved by a non-zero multiple of 2**32, the fraction kept or dropped.

    A ``uint32`` of seconds turns 1966 into 2102, an ``int32`` turns 2100 into 1963 (both seen in archive
    formats with 32-bit time fields); either way the distance is whole turns of 2**32 seconds. An ``int64`` of
    ns that overflows (``sec * 1000000000`` in C) turns 2400 into 1815: whole turns of 2**64 ns.
    """
    if actual_ns != expected_ns and (actual_ns - expected_ns) % 2**64 == 0:
        return True
    seconds, frac = divmod(actual_ns, NS_PER_S)
    toward_zero = -((-expected_ns) // NS_PER_S) if expected_ns < 0 else expected_ns // NS_PER_S
    for source_seconds in {expected_ns // NS_PER_S, toward_zero}:
        turns, rest = divmod(seconds - source_seconds, 2**32)
        if turns and not rest and frac in (0, expected_ns - source_seconds * NS_PER_S):
            return True
    return False

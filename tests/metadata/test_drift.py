"""The classifier names what happened to a timestamp and never calls an exact match a mismatch."""

from __future__ import annotations

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from artifactkit.metadata import drift as dx
from artifactkit.metadata import range_edges
from tests.strategies import NS_PER_S, fractional_recent_ns, timestamps_ns

# 100 ns joined the units in issue 25 (Windows FILETIME, 7-Zip): a float round trip or a value that lands
# on a multiple of 100 ns is named by it first, so the assumptions below exclude that unit too.
UNITS = [(NS_PER_S, dx.SECOND_TRUNCATED), (1_000_000, dx.MILLISECOND_TRUNCATED), (1_000, dx.MICROSECOND_TRUNCATED),
         (100, dx.HUNDRED_NS_TRUNCATED)]


def classify(expected: int, actual: int, ctime: int | None = None, field: str = "atime_ns",
             mtime: int | None = None) -> str | None:
    return dx.classify_time(expected, actual, field=field, ctime_ns=ctime, mtime_ns=mtime)


# Range edges seen or documented, in whole seconds (see drift.py for the sources).
CEILINGS_S = [2**31 - 1, 2_147_310_847, 2**32 - 1, 2**34 - 1 - 2**31, 16_299_260_424, 4_354_819_198]
FLOORS_S = [-(2**31), 0, 315_532_800]
NOW_NS = 1_790_000_000_000_000_000


@given(timestamps_ns)
def test_an_exact_value_is_never_a_mismatch(value: int) -> None:
    assert classify(value, value) is None


@given(timestamps_ns, st.sampled_from(range(len(UNITS))), st.booleans())
def test_truncation_is_named_by_the_coarsest_unit_that_explains_it(
        value: int, unit_index: int, toward_zero: bool) -> None:
    unit, name = UNITS[unit_index]
    truncated = (-((-value) // unit) * unit) if (toward_zero and value < 0) else (value // unit) * unit
    assume(truncated != value)
    # Indistinguishable cases (truncating to ms gave a whole second too) are named by the coarser unit.
    for coarser, _ in UNITS[:unit_index]:
        assume(truncated not in dx.truncations(value, coarser))
    assert classify(value, truncated) == name


@given(fractional_recent_ns)
def test_a_float_seconds_round_trip_is_named_float_rounded(value: int) -> None:
    # What os.utime(times=(st.st_atime, ...)) does: float seconds, fraction floored to ns.
    seconds = value / NS_PER_S
    frac, whole = math.modf(seconds)
    round_tripped = int(whole) * NS_PER_S + math.floor(frac * 1e9)
    assume(round_tripped != value)
    assume(all(round_tripped not in dx.truncations(value, unit) for unit, _ in UNITS))
    assert classify(value, round_tripped) == dx.FLOAT_ROUNDED


@given(fractional_recent_ns)
def test_st_atime_float_multiplied_back_is_float_rounded(value: int) -> None:
    sec, nsec = divmod(value, NS_PER_S)
    round_tripped = int((sec + nsec * 1e-9) * 1e9)
    assume(round_tripped != value)
    assume(all(round_tripped not in dx.truncations(value, unit) for unit, _ in UNITS))
    assert classify(value, round_tripped) == dx.FLOAT_ROUNDED


def test_float_rounding_at_todays_epoch_loses_hundreds_of_ns() -> None:
    value = 1_700_000_000_123_456_789
    actual = int(value / NS_PER_S * 1e9)
    assert actual != value and abs(actual - value) < 1000
    assert classify(value, actual) == dx.FLOAT_ROUNDED


def test_an_atime_moved_past_ctime_was_advanced_by_a_read() -> None:
    historical, restored_ctime = 1_500_000_000_123_456_789, 1_790_000_000_000_000_000
    assert classify(historical, restored_ctime + 5_000, ctime=restored_ctime) == dx.ADVANCED_BY_READ


def test_an_atime_from_the_copy_itself_sits_before_ctime_and_is_omitted() -> None:
    historical, restored_ctime = 1_500_000_000_123_456_789, 1_790_000_000_000_000_000
    assert classify(historical, restored_ctime - 40_000, ctime=restored_ctime) == dx.OMITTED


def test_an_mtime_moved_forward_is_never_blamed_on_a_read() -> None:
    historical, ctime = 1_500_000_000_123_456_789, 1_790_000_000_000_000_000
    assert classify(historical, ctime + 5, ctime=ctime, field="mtime_ns") == dx.DIFFERS
    assert classify(historical, ctime - 5, ctime=ctime, field="mtime_ns") == dx.OMITTED


def test_values_beyond_a_32_bit_filesystem_are_clamped_to_its_limits() -> None:
    assert classify(4_102_444_800_123_456_789, (2**31 - 1) * NS_PER_S) == dx.CLAMPED
    assert classify(-(2**33) * NS_PER_S, -(2**31) * NS_PER_S) == dx.CLAMPED


def test_an_unexplained_difference_says_so() -> None:
    assert classify(1_500_000_000_000_000_000, 1_400_000_000_123_456_789) == dx.DIFFERS



def test_borgs_2038_edge_48_hours_short_of_32_bits_is_clamped() -> None:
    # borg 1.2 restored a 2100-01-01 mtime as 2147310847 s (2**31 - 1 - 48 h), whole seconds.
    assert classify(4_102_444_800_123_456_789, 2_147_310_847 * NS_PER_S, ctime=NOW_NS, field="mtime_ns") == dx.CLAMPED
    # ... and a 1966 mtime as 0; unzip gave the same 1966 mtime 1980-01-01, the DOS epoch.
    assert classify(-100_000_000_123_456_789, 0, ctime=NOW_NS, field="mtime_ns") == dx.CLAMPED
    assert classify(-100_000_000_123_456_789, 315_532_800 * NS_PER_S, field="mtime_ns") == dx.CLAMPED


@given(st.sampled_from(CEILINGS_S), st.integers(min_value=NS_PER_S, max_value=2**40 * NS_PER_S))
def test_any_value_beyond_a_ceiling_landing_on_it_is_clamped(edge_s: int, beyond_ns: int) -> None:
    assert classify(edge_s * NS_PER_S + beyond_ns, edge_s * NS_PER_S, field="mtime_ns") == dx.CLAMPED


@given(st.sampled_from(FLOORS_S), st.integers(min_value=NS_PER_S, max_value=2**40 * NS_PER_S))
def test_any_value_below_a_floor_landing_on_it_is_clamped(edge_s: int, below_ns: int) -> None:
    assert classify(edge_s * NS_PER_S - below_ns, edge_s * NS_PER_S, field="mtime_ns") == dx.CLAMPED


@given(st.sampled_from(CEILINGS_S + FLOORS_S), st.integers(min_value=NS_PER_S, max_value=2**30 * NS_PER_S))
def test_a_value_that_moved_onto_an_edge_from_inside_the_range_is_not_clamped(edge_s: int, distance_ns: int) -> None:
    edge = edge_s * NS_PER_S
    inside = edge - distance_ns if edge_s in CEILINGS_S else edge + distance_ns
    assert classify(inside, edge, field="mtime_ns") != dx.CLAMPED


def test_a_second_truncation_onto_an_edge_is_truncation_not_clamping() -> None:
    assert classify(2_147_310_847_999_999_999, 2_147_310_847 * NS_PER_S) == dx.SECOND_TRUNCATED


@given(timestamps_ns, timestamps_ns)
def test_an_atime_given_the_entrys_historical_mtime_is_set_to_mtime(expected_atime: int, mtime: int) -> None:
    assume(mtime != expected_atime and not range_edges.is_clamped(expected_atime, mtime))
    assume(all(mtime not in dx.truncations(expected_atime, unit) for unit, _ in UNITS))
    assume(not (abs(mtime - expected_atime) < 10_000 and mtime in dx.float_round_trips(expected_atime)))
    assume(not NOW_NS - 3600 * NS_PER_S <= mtime <= NOW_NS)
    assume(not range_edges.is_wrapped(expected_atime, mtime))  # a 2**32 s wrap is named first (issue 25)
    assert classify(expected_atime, mtime, ctime=NOW_NS, mtime=mtime) == dx.SET_TO_MTIME


def test_a_post_2038_mtime_copied_into_atime_is_set_to_mtime_not_a_read() -> None:
    # restic: atime := mtime. That mtime lies past ctime, which alone would look like a read.
    atime, mtime = 2_147_483_648_000_000_001, 4_102_444_800_123_456_789
    assert classify(atime, mtime, ctime=NOW_NS, mtime=mtime) == dx.SET_TO_MTIME
    assert classify(atime, mtime, ctime=NOW_NS) == dx.ADVANCED_BY_READ  # what the kit said without the context


def test_a_directory_atime_given_the_supplied_mtime_is_set_to_mtime_after_its_mtime_moved_on() -> None:
    # borg: the root dir got atime = mtime = the archived mtime, then extracting into it moved its mtime.
    atime, mtime, moved = 1_700_000_001_987_654_321, 1_700_000_000_123_456_789, NOW_NS - 5_000
    assert dx.classify_time(atime, mtime, field="atime_ns", ctime_ns=NOW_NS, mtime_ns=moved,
                            expected_mtime_ns=mtime) == dx.SET_TO_MTIME
    assert classify(atime, mtime, ctime=NOW_NS, mtime=moved) == dx.DIFFERS


def test_both_times_from_the_copy_are_omitted_not_set_to_mtime() -> None:
    copy_time = NOW_NS - 40_000
    assert classify(1_500_000_000_123_456_789, copy_time, ctime=NOW_NS, mtime=copy_time) == dx.OMITTED


def test_an_mtime_is_never_set_to_mtime() -> None:
    assert classify(1_500_000_000_123_456_789, 1_400_000_000_123_456_789, ctime=NOW_NS, field="mtime_ns",
                    mtime=1_400_000_000_123_456_789) == dx.DIFFERS

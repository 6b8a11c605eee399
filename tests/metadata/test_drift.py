"""The classifier names what happened to a timestamp and never calls an exact match a mismatch."""

from __future__ import annotations

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from artifactkit.metadata import drift as dx
from tests.strategies import NS_PER_S, fractional_recent_ns, timestamps_ns

UNITS = [(NS_PER_S, dx.SECOND_TRUNCATED), (1_000_000, dx.MILLISECOND_TRUNCATED), (1_000, dx.MICROSECOND_TRUNCATED)]


def classify(expected: int, actual: int, ctime: int | None = None, field: str = "atime_ns") -> str | None:
    return dx.classify_time(expected, actual, field=field, ctime_ns=ctime)


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

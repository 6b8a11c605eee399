"""The diagnoses issue 25 added, and where each sits in the decision list against the others."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from artifactkit.metadata import drift as dx
from artifactkit.metadata import range_edges
from artifactkit.metadata.extended_compare import compare_extended
from artifactkit.metadata.model import FileMeta
from tests.strategies import NS_PER_S, timestamps_ns

NOW_NS = 1_790_000_000_000_000_000


def classify(expected: int, actual: int, *, field: str = "atime_ns", ctime: int | None = NOW_NS,
             mtime: int | None = None, expected_mtime: int | None = None,
             source_after: int | None = None) -> str | None:
    return dx.classify_time(expected, actual, field=field, ctime_ns=ctime, mtime_ns=mtime,
                            expected_mtime_ns=expected_mtime, source_after_ns=source_after)


# -- 100ns-truncated ---------------------------------------------------------------------------------

def test_a_100ns_floor_is_named_after_the_microsecond_and_before_float_rounding() -> None:
    assert classify(1_700_000_000_123_456_789, 1_700_000_000_123_456_700, field="mtime_ns") == dx.HUNDRED_NS_TRUNCATED
    # Coarser units still win where they explain the value (the coarsest explanation first) ...
    assert classify(1_700_000_000_123_456_789, 1_700_000_000_123_456_000, field="mtime_ns") == \
        dx.MICROSECOND_TRUNCATED
    # ... and a float loss that is no 100 ns floor stays float-rounded.
    assert classify(1_700_000_000_123_456_789, 1_700_000_000_123_456_768, field="mtime_ns") == dx.FLOAT_ROUNDED


def test_a_uniform_100ns_floor_is_named_so_even_where_one_value_also_looks_whole_seconds() -> None:
    # edge-times under 7-Zip: one-ns.txt's mtime ...000000001 floors to a whole second.
    cases = [dx.TimeCase(1_500_000_000_000_000_001, 1_500_000_000_000_000_000, "mtime_ns"),
             dx.TimeCase(1_700_000_000_123_456_789, 1_700_000_000_123_456_700, "mtime_ns")]
    assert [classify(c.expected_ns, c.actual_ns, field="mtime_ns") for c in cases] == [
        dx.SECOND_TRUNCATED, dx.HUNDRED_NS_TRUNCATED]
    assert dx.uniform_diagnoses(cases) == [dx.HUNDRED_NS_TRUNCATED, dx.HUNDRED_NS_TRUNCATED]


def test_a_tree_truncated_to_seconds_stays_second_truncated() -> None:
    cases = [dx.TimeCase(v, v // NS_PER_S * NS_PER_S, "mtime_ns") for v in (1_500_000_000_100_000_000,
                                                                            1_600_000_000_999_999_999)]
    assert dx.uniform_diagnoses(cases) == [dx.SECOND_TRUNCATED, dx.SECOND_TRUNCATED]


# -- wrapped ---------------------------------------------------------------------------------------------

def test_a_pre_1970_time_wrapped_to_unsigned_32_bit_seconds_is_wrapped_not_a_read() -> None:
    expected = -100_000_000_123_456_789           # 1966
    seconds, frac = divmod(expected, NS_PER_S)
    wrapped = (seconds % 2**32) * NS_PER_S + frac  # 2102: past ctime, where only a read would put an atime
    assert classify(expected, wrapped) == dx.WRAPPED
    assert classify(expected, wrapped, field="mtime_ns") == dx.WRAPPED
    assert classify(expected, seconds % 2**32 * NS_PER_S) == dx.WRAPPED  # fraction dropped as well


def test_a_post_2038_time_wrapped_to_signed_32_bit_seconds_is_wrapped_not_clamped() -> None:
    expected = 4_102_444_800_123_456_789           # 2100
    assert classify(expected, expected - 2**32 * NS_PER_S, field="mtime_ns") == dx.WRAPPED
    assert classify(expected, (2**31 - 1) * NS_PER_S, field="mtime_ns") == dx.CLAMPED  # an edge stays clamped


@given(timestamps_ns, st.sampled_from([-2, -1, 1, 2]))
def test_any_whole_multiple_of_2_32_seconds_away_is_wrapped(value: int, turns: int) -> None:
    wrapped = value + turns * 2**32 * NS_PER_S
    assume(not range_edges.is_clamped(value, wrapped))  # landing on a range edge from beyond it is named clamped first
    assert classify(value, wrapped, field="mtime_ns") == dx.WRAPPED


# -- set-to-mtime, floored ---------------------------------------------------------------------------------

def test_an_atime_given_the_mtime_floored_to_seconds_is_set_to_mtime() -> None:
    atime, mtime = 1_600_000_000_250_000_000, 1_650_000_000_500_000_000
    assert classify(atime, 1_650_000_000 * NS_PER_S, mtime=mtime, expected_mtime=mtime) == dx.SET_TO_MTIME


def test_a_directory_atime_given_its_floored_mtime_before_the_mtime_moved_is_set_to_mtime() -> None:
    atime, mtime, moved = 1_100_000_000_000_000_002, 1_100_000_000_700_000_001, NOW_NS - 5_000
    assert classify(atime, 1_100_000_000 * NS_PER_S, mtime=moved, expected_mtime=mtime) != dx.DIFFERS
    assert classify(atime, 1_100_000_000_700_000_000, mtime=moved, expected_mtime=mtime) == dx.SET_TO_MTIME


def test_a_tree_whose_atimes_are_its_floored_mtimes_is_set_to_mtime_where_both_share_a_second() -> None:
    # setuid-tool's atime and mtime share a second: alone, truncation explains it as well.
    shared = dx.TimeCase(1_300_000_000_223_456_789, 1_300_000_000_000_000_000, "atime_ns",
                         mtime_ns=1_300_000_000_123_456_789, expected_mtime_ns=1_300_000_000_123_456_789)
    apart = dx.TimeCase(1_600_000_000_250_000_000, 1_650_000_000_000_000_000, "atime_ns",
                        mtime_ns=1_650_000_000_500_000_000, expected_mtime_ns=1_650_000_000_500_000_000)
    assert dx.classify_case(shared) == dx.SECOND_TRUNCATED
    assert dx.uniform_diagnoses([shared, apart]) == [dx.SET_TO_MTIME, dx.SET_TO_MTIME]
    # Nothing tells them apart: neither fits better, so neither is claimed (issue 50).
    assert dx.uniform_diagnoses([shared]) == [dx.DIFFERS]


# -- the source's atime moved before the copier recorded it ----------------------------------------------------

def test_an_atime_equal_to_the_sources_moved_atime_was_recorded_after_a_read() -> None:
    expected, moved, mtime = 1_500_000_000_123_456_789, NOW_NS - 60 * NS_PER_S, 1_400_000_000_000_000_001
    restored = {"mtime": mtime, "expected_mtime": mtime}
    assert classify(expected, moved, source_after=moved, **restored) == dx.READ_BEFORE_RECORDED
    assert classify(expected, moved // NS_PER_S * NS_PER_S, source_after=moved, mtime=mtime // NS_PER_S * NS_PER_S,
                    expected_mtime=mtime) == dx.READ_BEFORE_RECORDED
    assert classify(expected, moved, **restored) == dx.OMITTED          # what the kit said without the source
    assert classify(expected, moved + 5, source_after=moved, **restored) == dx.OMITTED
    # A copier that restores no time at all left the copy's own time: equal to the source's only by the clock.
    assert classify(expected, moved, source_after=moved, mtime=moved, expected_mtime=mtime) == dx.OMITTED
    assert classify(expected, expected // NS_PER_S * NS_PER_S, source_after=expected) == dx.SECOND_TRUNCATED


# -- sparse-coarsened and sparse-filled ---------------------------------------------------------------------------

def _file(extents: tuple[tuple[int, int], ...] | None) -> FileMeta:
    return FileMeta(path="disk.img", kind="file", mode=0o644, size=8_388_608, mtime_ns=0, atime_ns=0, uid=0,
                    gid=0, extents=extents)


def test_holes_kept_at_a_coarser_granularity_are_sparse_coarsened_with_the_byte_counts() -> None:
    source = _file(((1_048_576, 4096), (6_291_456, 4096)))
    [coarse] = compare_extended(source, _file(((1_048_576, 65536), (6_291_456, 65536))), ("extents",))
    assert coarse.diagnosis == dx.SPARSE_COARSENED
    assert coarse.expected == "8192 of 8388608 bytes data in 2 run(s), 8380416 in holes"
    assert coarse.actual == "131072 of 8388608 bytes data in 2 run(s), 8257536 in holes"
    [filled] = compare_extended(source, _file(None), ("extents",))
    assert filled.diagnosis == dx.SPARSE_FILLED
    assert filled.actual == "dense: 8388608 of 8388608 bytes data, no hole"

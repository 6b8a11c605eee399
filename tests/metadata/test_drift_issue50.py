"""Issue 50 item 4: a 2-second floor has a name, and a value two explanations fit equally gets neither."""

from __future__ import annotations

from artifactkit.metadata import drift as dx

NS = 1_000_000_000


def test_a_2_second_floor_is_named_only_where_a_whole_second_floor_does_not_fit() -> None:
    odd = 1_695_000_003_250_000_001  # an odd second: floored to 2 s it lands a second lower
    even = 1_695_000_004_250_000_001
    assert dx.classify_time(odd, 1_695_000_002 * NS, field="mtime_ns", ctime_ns=None) == dx.TWO_SECOND_TRUNCATED
    assert dx.classify_time(even, 1_695_000_004 * NS, field="mtime_ns", ctime_ns=None) == dx.SECOND_TRUNCATED
    cases = [dx.TimeCase(odd, 1_695_000_002 * NS, "mtime_ns"), dx.TimeCase(even, 1_695_000_004 * NS, "mtime_ns")]
    assert dx.uniform_diagnoses(cases) == [dx.TWO_SECOND_TRUNCATED] * 2


def test_even_seconds_alone_never_make_a_tree_2s_truncated() -> None:
    cases = [dx.TimeCase(1_695_000_004_250_000_001 + i * 2 * NS, 1_695_000_004 * NS + i * 2 * NS, "mtime_ns")
             for i in range(3)]
    assert dx.uniform_diagnoses(cases) == [dx.SECOND_TRUNCATED] * 3


def test_an_atime_that_truncation_and_atime_from_mtime_explain_alike_is_differs() -> None:
    # atime and mtime share their second: floor(atime) == floor(mtime), in every difference of the tree.
    mtimes = [1_694_000_002_111_111_111 + i * NS for i in range(3)]
    cases = [dx.TimeCase(mtime + 111_111_111, mtime // NS * NS, "atime_ns", mtime_ns=mtime, expected_mtime_ns=mtime)
             for mtime in mtimes]
    assert dx.uniform_diagnoses(cases) == [dx.DIFFERS] * 3



def test_a_time_past_2262_clamped_to_the_largest_i64_ns_is_clamped() -> None:
    # xfs bigtime holds 2486, btrfs and tmpfs 64-bit seconds: a tool keeping i64 ns stops at 2262-04-11.
    year_2486 = 16_299_260_424 * NS
    assert dx.classify_time(year_2486, 2**63 - 1, field="mtime_ns", ctime_ns=None) == dx.CLAMPED
    assert dx.classify_time(-(2**31) * NS - 5 * NS, -(2**63), field="mtime_ns", ctime_ns=None) != dx.CLAMPED
    assert dx.classify_time(-(2**63) - 7 * NS, -(2**63), field="mtime_ns", ctime_ns=None) == dx.CLAMPED


def test_a_time_past_2038_clamped_to_32_bit_seconds_is_clamped() -> None:
    assert dx.classify_time(4_102_444_800_123_456_789, (2**31 - 1) * NS, field="mtime_ns",
                            ctime_ns=None) == dx.CLAMPED

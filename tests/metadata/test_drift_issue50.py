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


def test_a_time_past_2262_overflowing_i64_ns_is_wrapped() -> None:
    year_2400 = 13_574_563_200_123_456_789
    assert dx.classify_time(year_2400, year_2400 - 2**64, field="mtime_ns", ctime_ns=None) == dx.WRAPPED
    assert dx.classify_time(-(2**63) - 5, 2**63 - 5, field="mtime_ns", ctime_ns=None) == dx.WRAPPED


def test_a_time_past_2038_clamped_to_32_bit_seconds_is_clamped() -> None:
    assert dx.classify_time(4_102_444_800_123_456_789, (2**31 - 1) * NS, field="mtime_ns",
                            ctime_ns=None) == dx.CLAMPED


# -- around the copy's ctime: what the kit saw of the copy decides (issue 50 items 4a and 4d) ----------------------

HISTORICAL = 1_500_000_000_123_456_789
CTIME = 1_790_000_000_000_000_000
TICK = dx.coarse_tick_ns()


def _around_ctime(actual: int, reads: str | None, *, btime: int | None = CTIME - 50_000_000,
                  source_after: int | None = None) -> tuple[str | None, tuple[str, ...]]:
    return dx.explain_case(dx.TimeCase(HISTORICAL, actual, "atime_ns", CTIME, 1_400_000_000_000_000_001,
                                       1_400_000_000_000_000_001, source_after, reads, btime))


def test_past_ctime_a_read_event_says_read_and_none_on_a_watched_inode_says_set() -> None:
    assert _around_ctime(CTIME + 300_000, dx.READS_SEEN) == (dx.ADVANCED_BY_READ, ())
    assert _around_ctime(CTIME + 300_000, dx.READS_NONE) == (dx.SET_TO_COPY_TIME, ())
    # A symlink's reads raise no event: near ctime both fit (the run settles it by the copier's files), far past
    # it only a read reaches.
    assert _around_ctime(CTIME + 300_000, dx.READS_BLIND) == (
        dx.ADVANCED_BY_READ, (dx.ADVANCED_BY_READ, dx.SET_TO_COPY_TIME))
    assert _around_ctime(CTIME + 60 * NS, dx.READS_BLIND) == (dx.ADVANCED_BY_READ, ())


def test_before_ctime_the_birth_stamp_says_never_set_and_any_other_unread_value_says_set() -> None:
    born = CTIME - 40_000
    assert _around_ctime(born, dx.READS_NONE, btime=born) == (dx.OMITTED, ())
    assert _around_ctime(born + 7, dx.READS_NONE, btime=born) == (dx.SET_TO_COPY_TIME, ())
    # Read during the copy and not its birth stamp: a read before the last change, then never set, or a set.
    assert _around_ctime(born + 7, dx.READS_SEEN, btime=born) == (dx.DIFFERS, (dx.OMITTED, dx.SET_TO_COPY_TIME))
    # At ctime itself a read in the same tick fits as well.
    assert _around_ctime(CTIME, dx.READS_SEEN, btime=born) == (
        dx.DIFFERS, (dx.OMITTED, dx.SET_TO_COPY_TIME, dx.ADVANCED_BY_READ))


def test_where_the_copy_was_not_watched_the_times_alone_say_what_they_always_said() -> None:
    assert _around_ctime(CTIME + 5_000, None) == (dx.ADVANCED_BY_READ, ())
    assert _around_ctime(CTIME - 40_000, None) == (dx.OMITTED, ())
    assert _around_ctime(CTIME - 40_000, dx.READS_NONE, btime=None) == (dx.OMITTED, ())


def test_a_same_second_match_with_the_sources_moved_atime_is_read_before_recorded_only_off_the_copys_second() -> None:
    read = CTIME - 60 * NS + 250_000_000  # the source's atime after the copier's read, a minute before the copy
    floored = read // NS * NS
    assert _around_ctime(floored, None, btime=None, source_after=read) == (dx.READ_BEFORE_RECORDED, ())
    # The same match where the copy itself happened in that second: its own time, floored, gives it as well.
    read = CTIME - 2_000_000  # the source read two ms before the copy's last change, in the second before it
    name, rivals = _around_ctime(read // NS * NS, None, btime=CTIME - 1_000, source_after=read)
    assert name == dx.DIFFERS and dx.READ_BEFORE_RECORDED in rivals and dx.SET_TO_COPY_TIME in rivals


def test_an_exact_match_that_is_also_the_copys_birth_stamp_leaves_the_run_to_settle_it() -> None:
    stamp = CTIME - 30_000
    assert _around_ctime(stamp, dx.READS_NONE, btime=stamp, source_after=stamp) == (
        dx.READ_BEFORE_RECORDED, (dx.READ_BEFORE_RECORDED, dx.OMITTED))
    assert _around_ctime(stamp, dx.READS_NONE, btime=stamp - 9, source_after=stamp) == (dx.READ_BEFORE_RECORDED, ())

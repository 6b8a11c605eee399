"""Issue 50 item 4 over real files: a diagnosis only where the evidence fits it better than every other."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifactkit._fanotify import FanotifyUnavailable
from artifactkit.conformance import checks as conformance
from artifactkit.conformance import copy_reads
from artifactkit.metadata import drift as dx
from tests.support import faulty_copiers as faulty
from tests.support import faulty_copiers_round3 as round3
from tests.support.capability import require_fanotify

#: The checks that hold the copy's atimes: files, directories, links.
COPY_TIMES = ("atime_ns", "dir_times", "symlink_times")


def _special_atimes(report: conformance.Report) -> set[str]:
    return {f.diagnosis for f in report.result("special_files").failures if f.field == "atime_ns"}


def test_on_special_files_alone_a_whole_second_atime_and_atime_from_mtime_are_differs(tmpfs_strict: Path) -> None:
    # Every atime there shares its second with its mtime: a floor and atime := floored mtime fit alike.
    for copier in (faulty.truncates_to_seconds, faulty.sets_atime_to_floored_mtime):
        assert _special_atimes(conformance.check(copier, corpus="special-files", base=tmpfs_strict)) == {dx.DIFFERS}


def test_another_tree_of_the_run_settles_which_rule_the_copier_applied(tmpfs_strict: Path) -> None:
    trees = ["special-files", "edge-times"]
    truncated = conformance.check(faulty.truncates_to_seconds, corpus=trees, base=tmpfs_strict)
    assert _special_atimes(truncated) == {dx.SECOND_TRUNCATED}
    from_mtime = conformance.check(faulty.sets_atime_to_floored_mtime, corpus=trees, base=tmpfs_strict)
    assert _special_atimes(from_mtime) == {dx.SET_TO_MTIME}


def _atimes_of_the_copy(report: conformance.Report) -> dict[str, set[str]]:
    return {name: {f.diagnosis for f in report.result(name).failures if f.field == "atime_ns"} for name in COPY_TIMES}


def test_a_copier_that_sets_atime_to_the_copy_time_without_reading_is_set_to_copy_time(tmpfs_strict: Path) -> None:
    # utime(now, mtime): the fine "now" lies up to a tick past the coarse ctime that call stamps, where a read's
    # atime lies too. No read event on the inode during the copy: it was set (links, whose reads raise no event,
    # are named by what the same copier shows on its files and directories).
    require_fanotify()
    report = conformance.check(round3.sets_atime_to_now, corpus=["basic", "edge-times", "links"], base=tmpfs_strict)
    assert _atimes_of_the_copy(report) == {name: {dx.SET_TO_COPY_TIME} for name in COPY_TIMES}
    assert report.result("atime_ns").diagnosis == "atime: set-to-copy-time"
    assert report.environment["copy_reads"] == "watched with fanotify"


def test_a_time_set_to_now_just_before_a_fine_ctime_is_set_to_copy_time_not_omitted(tmpfs_strict: Path) -> None:
    # Within one clock tick before ctime lies an atime never set, too: the inode's birth stamp tells them apart.
    require_fanotify()
    report = conformance.check(round3.sets_atime_to_now_after_a_stat, corpus=["basic", "links"], base=tmpfs_strict)
    assert _atimes_of_the_copy(report) == {name: {dx.SET_TO_COPY_TIME} for name in COPY_TIMES}


def test_unwatched_the_times_alone_decide_and_the_report_says_why(
        tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*, permission: bool) -> int:
        raise FanotifyUnavailable(1, "fanotify unavailable: needs CAP_SYS_ADMIN")

    monkeypatch.setattr(copy_reads, "open_group", refused)
    report = conformance.check(round3.sets_atime_to_now, corpus="basic", base=tmpfs_strict)
    assert report.environment["copy_reads"] == "not watched: fanotify unavailable: needs CAP_SYS_ADMIN"
    assert _atimes_of_the_copy(report)["atime_ns"] == {dx.ADVANCED_BY_READ}  # past ctime: what the times say


def test_a_copier_that_reads_its_output_after_setting_times_stays_advanced_by_read_when_watched(
        tmpfs_strict: Path) -> None:
    require_fanotify()
    report = conformance.check(faulty.verifies_after_restore, corpus=["basic", "links"], base=tmpfs_strict)
    assert _atimes_of_the_copy(report) == {name: {dx.ADVANCED_BY_READ} for name in COPY_TIMES}


def test_an_atime_never_set_stays_omitted_when_watched(tmpfs_strict: Path) -> None:
    require_fanotify()
    report = conformance.check(faulty.drops_atime, corpus=["basic", "links"], base=tmpfs_strict)
    assert _atimes_of_the_copy(report) == {name: {dx.OMITTED} for name in COPY_TIMES}


def test_a_same_second_match_with_the_sources_moved_atime_is_no_read_before_recorded(tmpfs_strict: Path) -> None:
    # Whole seconds, atime the copy's own second: the source's atime, moved by the copier's read in that second,
    # floors to the same value. Nothing tells "recorded after the read" from "the copy's own time": differs.
    report = conformance.check(round3.sets_atime_to_the_copy_second, corpus=["basic", "links"], base=tmpfs_strict)
    found = set().union(*_atimes_of_the_copy(report).values())
    assert dx.READ_BEFORE_RECORDED not in found
    assert found == {dx.DIFFERS}
    cell = report.result("atime_ns").failures[0]
    assert isinstance(cell.expected, int) and isinstance(cell.actual, int)  # both values, as for any differs

"""Issue 50 item 4 over real files: a diagnosis only where the evidence fits it better than every other."""

from __future__ import annotations

from pathlib import Path

from artifactkit.conformance import checks as conformance
from artifactkit.metadata import drift as dx
from tests.support import faulty_copiers as faulty


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

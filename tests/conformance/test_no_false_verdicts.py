"""Issue 50: no check passes on a tree that never ran, a copy that is the source is not a copy, and the
kit's own reads are never evidence against the copier. Each copier here fooled the kit before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance import checks as conformance
from artifactkit.errors import MetadataMismatchError
from artifactkit.metadata import drift as dx
from tests.support import faulty_copiers_round3 as faulty

REFUSES_HARDLINKS = "tests.support.faulty_copiers_round3:refuses_hardlinks"
TIME_CHECKS = ("mtime_ns", "atime_ns", "dir_times", "symlink_times")


def test_a_check_whose_only_tree_was_refused_is_null_with_the_reason(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.refuses_hardlinks, corpus=["basic", "hardlinks"], base=tmpfs_strict)
    row = report.result("hardlinks")
    assert row.passed is None
    assert row.reason is not None and "hardlinks" in row.reason and "refusing to archive a hard link" in row.reason
    assert row.to_json()["ran"] is False
    assert report.result("content").passed is True  # basic ran: what it holds has a verdict
    assert not report.holds(require=("hardlinks",))
    assert report.holds()  # the default: every check that ran
    with pytest.raises(MetadataMismatchError, match="required check hardlinks: not run"):
        report.raise_for_failures(require=("hardlinks",))


def test_a_check_the_chosen_trees_do_not_exercise_is_null_and_names_them(tmpfs_strict: Path) -> None:
    row = conformance.check(faulty.refuses_hardlinks, corpus="basic", base=tmpfs_strict).result("special_files")
    assert (row.passed, row.reason) == (None, "not run: no tree checked here holds what it checks (checked: basic)")


def test_require_of_a_check_no_tree_ran_exits_1_and_says_so(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", "--copier", REFUSES_HARDLINKS, "--corpus", "basic", "--corpus", "hardlinks",
            "--base", str(tmpfs_strict)]
    assert main([*argv, "--require", "hardlinks"]) == 1
    out = capsys.readouterr().out
    assert "all required checks hold" not in out
    assert "a required check did not run: hardlinks" in out
    assert main([*argv, "--require", "hardlinks", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    row = next(item for item in doc["checks"] if item["check"] == "hardlinks")
    assert (row["passed"], row["ran"]) == (None, False)
    assert main([*argv, "--require", "content,mode"]) == 0  # what ran still decides on its own
    capsys.readouterr()


def test_a_copy_made_of_hard_links_to_the_source_fails_hardlinks_saying_so(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.links_to_the_source, corpus=["basic", "links"], base=tmpfs_strict)
    shared = report.result("hardlinks").failures
    assert shared and {f.diagnosis for f in shared} == {dx.SHARES_SOURCE_INODE}
    assert {f.path for f in shared} >= {"README.txt", "to-file"}
    assert "the source's own inode" in shared[0].headline()


def test_the_kits_own_readlink_of_a_shared_inode_is_never_charged_to_the_copier(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.links_to_the_source, corpus="links", base=tmpfs_strict)
    # Its times are the source's own: nothing the copier did moved one. Only the kit read the links.
    assert [f.headline() for name in TIME_CHECKS for f in report.result(name).failures] == []
    assert report.result("source_untouched").passed is True


def test_a_two_second_floor_is_2s_truncated(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.floors_to_two_seconds, corpus=["edge-times", "basic"], base=tmpfs_strict)
    found = {f.diagnosis for name in TIME_CHECKS for f in report.result(name).failures}
    assert found == {dx.TWO_SECOND_TRUNCATED}


"""Issue 25: copiers that fooled the kit, each reproduced by a faulty copier, now fail what they break."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance import checks as conformance
from artifactkit.conformance import destination
from artifactkit.isolation.tree import NoatimeTree
from artifactkit.metadata import drift as dx
from artifactkit.metadata.model import FileMeta
from tests.support import faulty_copiers as faulty

LINKS_AS_FILES = "tests.support.faulty_copiers:links_become_files"


def test_a_copier_that_turns_links_into_files_fails_symlink_times_with_kind_differs(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.links_become_files, corpus="links", base=tmpfs_strict)
    # Each link carries a mode and two times in the source: all three checks fail, content too. The
    # dropped dangling link lost its owner as well; the others kept theirs (same owner, other kind).
    assert report.failed == {"content", "mode", "symlink_times", "owner"}
    assert {f.path for f in report.result("owner").failures} == {"dangling"}
    link_times = report.result("symlink_times").failures
    assert {(f.path, f.field, f.diagnosis) for f in link_times} == {
        (path, field, diagnosis)
        for path, diagnosis in (("to-file", dx.KIND_DIFFERS), ("to-dir", dx.KIND_DIFFERS),
                                ("real/up", dx.KIND_DIFFERS), ("dangling", dx.MISSING))
        for field in ("mtime_ns", "atime_ns")}
    assert report.result("symlink_times").diagnosis == "mtime: missing"  # "dangling" sorts first


def test_require_symlink_times_exits_1_for_a_copier_that_turns_links_into_files(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", LINKS_AS_FILES, "--corpus", "links", "--base", str(tmpfs_strict),
                 "--require", "symlink_times", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    row = next(item for item in doc["checks"] if item["check"] == "symlink_times")
    assert row["passed"] is False


def test_a_missing_entry_fails_every_check_its_source_entry_carries(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.fails_after_partial_copy, corpus="edge-times", base=tmpfs_strict)
    setuid = {f.check for item in report.checks for f in item.failures if f.path == "setuid-tool"}
    assert setuid == {"content", "mode", "special_bits", "mtime_ns", "atime_ns", "owner"}
    assert {f.diagnosis for f in report.result("symlink_times").failures} == {dx.MISSING}


REFUSES_LINKS = "tests.support.faulty_copiers:refuses_symlinks"


def test_a_tree_the_copier_refuses_is_not_run_with_its_reason_and_every_other_tree_is_checked(
        tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.refuses_symlinks, corpus=["basic", "links", "edge-times"], base=tmpfs_strict)
    assert [name for name, _ in report.not_run] == ["links", "edge-times"]
    reason = dict(report.not_run)["links"]
    assert reason.startswith("not run: ") and "refusing to archive a symlink" in reason
    assert str(tmpfs_strict) not in reason
    assert report.failed == frozenset()
    assert [tree["passed"] for tree in report.to_json()["corpora"]] == [True, None, None]


def test_json_prints_its_document_and_exits_by_what_was_checked_when_one_tree_is_refused(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", "--copier", REFUSES_LINKS, "--base", str(tmpfs_strict), "--json"]
    assert main([*argv, "--corpus", "basic", "--corpus", "links"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["corpora"][1]["corpus"] == "links" and doc["corpora"][1]["reason"].startswith("not run: ")
    # symlink_times only links holds: refused, so no verdict, never a pass (issue 50); the rest basic decides.
    assert all(item["passed"] is (True if item["ran"] else None) for item in doc["checks"])
    link_times = next(item for item in doc["checks"] if item["check"] == "symlink_times")
    assert "links: not run: " in link_times["reason"] and "refusing to archive a symlink" in link_times["reason"]


def test_json_prints_its_document_with_the_error_when_no_tree_could_be_checked(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", REFUSES_LINKS, "--corpus", "links", "--base", str(tmpfs_strict),
                 "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 2
    assert doc["schema"] == "artifactkit.conformance/1"
    assert doc["error"]["schema"] == "artifactkit.error/1"
    assert (doc["error"]["type"], doc["error"]["exit_code"]) == ("CopierCannotRunError", 2)
    assert {item["passed"] for item in doc["checks"]} == {None}
    assert "refusing to archive a symlink" in captured.err


def test_json_prints_an_error_document_for_a_setup_error(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--copier", "cp -a", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema"], doc["exit_code"], doc["type"]) == ("artifactkit.error/1", 2, "CopierError")


def test_a_copier_that_rewrites_the_sources_mtimes_and_modes_fails_source_untouched(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.rewrites_source_times_and_modes, corpus="basic", base=tmpfs_strict)
    assert report.failed == {"source_untouched"}
    found = {(f.field, f.diagnosis) for f in report.result("source_untouched").failures}
    assert ("mtime_ns", dx.SECOND_TRUNCATED) in found
    assert ("mode", dx.MODE_DIFFERS) in found
    assert "atime_ns" not in {field for field, _ in found}  # the atimes it kept are not blamed
    # ctime cannot be restored, so it is evidence, not a check: every rewritten file's ctime moved.
    assert report.source_ctimes_moved >= len({f.path for f in report.result("source_untouched").failures})
    assert report.to_json()["source_ctimes_moved"] == report.source_ctimes_moved


def test_the_old_name_source_atime_untouched_still_works_in_require(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = conformance.check(faulty.reads_source_plainly, corpus="basic", base=tmpfs_strict)
    assert not report.holds(require=("source_atime_untouched",))
    assert report.holds(require=("content", "mode"))
    code = main(["conformance", "--copier", "tests.support.faulty_copiers:reads_source_plainly", "--corpus",
                 "basic", "--base", str(tmpfs_strict), "--require", "source_atime_untouched"])
    assert code == 1
    assert "source_untouched" in capsys.readouterr().out


def test_a_copier_that_reads_its_own_output_after_setting_times_fails_atime_with_advanced_by_read(
        tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.verifies_after_restore, corpus=["basic", "edge-times"], base=tmpfs_strict)
    # Files read, directories listed, the link to a file followed (os.walk's is_dir): each atime moved.
    assert report.failed == {"atime_ns", "dir_times", "symlink_times"}
    for name in ("atime_ns", "dir_times", "symlink_times"):
        assert {(f.field, f.diagnosis) for f in report.result(name).failures} == {("atime_ns", dx.ADVANCED_BY_READ)}
    assert report.result("atime_ns").diagnosis == "atime: advanced-by-read, during the copy, after the time was set"


def test_a_copier_that_restores_the_sources_flags_is_not_charged_for_the_kits_own_read(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.restores_source_flags, corpus=["basic", "sparse"], base=tmpfs_strict)
    assert report.failed == {"sparse"}  # the copy writes holes as data; its flags and times are exact
    assert report.result("survives_read").passed is True
    assert report.result("inode_flags").passed is True


def test_the_copier_writes_where_reads_move_atime_and_the_kits_own_capture_moves_nothing(tmpfs_strict: Path) -> None:
    seen: list[bool] = []

    def reads_back_a_historical_atime(src: str, dst: str) -> None:
        faulty.exact(src, dst)
        probe = os.path.join(os.path.dirname(dst), ".probe")
        with open(probe, "wb") as out:
            out.write(b"x")
        os.utime(probe, ns=(1_000_000_000, 1_000_000_000))
        with open(probe, "rb") as handle:
            handle.read()
        seen.append(os.lstat(probe).st_atime_ns != 1_000_000_000)
        os.unlink(probe)

    report = conformance.check(reads_back_a_historical_atime, corpus="basic", base=tmpfs_strict)
    assert seen == [True]  # a read beside the destination moves atime, as on the filesystem under test
    assert report.failed == frozenset()  # and none of the kit's own reads of the copy showed as a finding


def test_an_atime_the_copier_never_set_is_omitted_even_where_its_own_listing_moved_it(tmpfs_strict: Path) -> None:
    def never_sets_dir_times_then_lists(src: str, dst: str) -> None:
        faulty.forgets_directory_times(src, dst)
        for _dirpath, _dirs, _files in os.walk(dst):  # a listing after its last write: atime past ctime
            pass

    report = conformance.check(never_sets_dir_times_then_lists, corpus="basic", base=tmpfs_strict)
    assert report.failed == {"dir_times"}
    # "advanced-by-read, during the copy, after the time was set" would be false: no time was set.
    assert {(f.field, f.diagnosis) for f in report.result("dir_times").failures} == {
        ("mtime_ns", dx.OMITTED), ("atime_ns", dx.OMITTED)}


def test_survives_read_fails_when_a_read_moves_a_time_that_the_flag_did_not_hold(
        tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy that changes when read, stood in for by a flag that is never set (as FUSE may ignore it).
    monkeypatch.setattr(conformance, "flag_for_reading", lambda tree, root, entries: {})
    report = conformance.check(faulty.exact, corpus="basic", base=tmpfs_strict)
    assert report.failed == {"survives_read"}
    assert report.result("survives_read").diagnosis == "atime: advanced-by-read, moved by a read after the copy"


def test_entries_the_kit_cannot_flag_leave_survives_read_not_run_with_why(
        tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses_one(tree: NoatimeTree, root: str, entries: Iterable[FileMeta]) -> dict[str, str]:
        # As an immutable inode would: every other entry flagged, "data" not (and its listing then moves it).
        refused = destination.flag_for_reading(tree, root, [e for e in entries if e.path != "data"])
        return {**refused, "data": "FS_NOATIME_FL could not be set (forbidden, errno 1)"}

    monkeypatch.setattr(conformance, "flag_for_reading", refuses_one)
    row = conformance.check(faulty.exact, corpus="basic", base=tmpfs_strict).result("survives_read")
    assert row.passed is None
    assert row.reason == "not run on 1 entry of basic (data: FS_NOATIME_FL could not be set (forbidden, errno 1))"

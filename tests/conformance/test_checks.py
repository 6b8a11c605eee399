"""The conformance kit holds copiers to the rules: each bug fails exactly its checks, ours none."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from artifactkit.conformance import checks as conformance
from artifactkit.conformance.copiers import CopierError, NamedCopier, argv_copier, resolve_copier
from artifactkit.errors import (
    CopierCannotRunError,
    CopierSetupError,
    IsolationError,
    MetadataMismatchError,
    ToolFailedError,
)
from tests.support import faulty_copiers as faulty
from tests.support.capability import require_loop_devices
from tests.support.mounts import Mounts

# Small trees that hold every kind of entry the checks sort by: files, nested and sticky dirs,
# setuid, links to a file, to a dir, dangling and upward; ns extremes before 1970 and after 2038.
SMALL = ("edge-times", "links")
TIMES = {"mtime_ns", "atime_ns", "dir_times", "symlink_times"}

FAULTY = [
    # (copier, exactly the checks it must fail, a diagnosis one of those checks must show first)
    ("exact", set(), None),
    ("drops_atime", {"atime_ns", "dir_times", "symlink_times"}, "atime: omitted"),
    ("truncates_to_seconds", TIMES, "mtime: second-truncated"),
    ("float_round_trip", TIMES, "mtime: float-rounded"),
    ("forgets_directory_times", {"dir_times"}, "mtime: omitted"),
    ("sets_directory_times_before_children", {"dir_times"}, "mtime: omitted"),
    ("forgets_symlink_times", {"symlink_times"}, "mtime: omitted"),
    # A link copied as what it points to lost its mode and times too (issue 25: it passed both).
    ("follows_symlinks", {"content", "mode", "symlink_times", "owner"}, "kind: kind-differs"),
    ("drops_special_bits", {"special_bits"}, "special bits: mode-differs (0o4755 -> 0o0755)"),
    ("applies_umask", {"mode"}, "mode: mode-differs (0o1777 -> 0o1755)"),
    ("reads_source_plainly", {"source_untouched"}, "atime: advanced-by-read, source atime moved by the copy"),
    # Its output is exact: it failed survives_read only because the kit's flagged destination did not cover
    # inodes renamed in (issue 25: the kit now flags the copy itself before reading it).
    ("copies_elsewhere_then_renames_in", set(), None),
    ("removes_source", {"source_untouched"}, "presence: missing, source entry removed by the copy"),
    # Every entry left uncopied fails all that it carried (issue 25: only content, before).
    ("fails_after_partial_copy", {"content", "mode", "special_bits", "mtime_ns", "atime_ns", "dir_times",
                                  "symlink_times", "owner"}, "copier-failed (CalledProcessError"),
]


@pytest.mark.parametrize(("name", "failing", "diagnosis"), FAULTY, ids=[row[0] for row in FAULTY])
def test_each_faulty_copier_fails_exactly_the_checks_its_bug_breaks(
        name: str, failing: set[str], diagnosis: str | None, tmpfs_strict: Path) -> None:
    report = conformance.check(getattr(faulty, name), corpus=SMALL, base=tmpfs_strict)
    assert report.failed == failing
    assert [item.check for item in report.checks] == list(conformance.CHECKS)
    if diagnosis is not None:
        shown = [item.diagnosis or "" for item in report.checks if not item.passed]
        assert any(text.startswith(diagnosis) for text in shown), shown


def test_time_failures_name_the_field_values_and_delta_of_every_entry(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.truncates_to_seconds, corpus="edge-times", base=tmpfs_strict)
    one_ns = [f for f in report.result("mtime_ns").failures if f.path == "one-ns.txt"]
    assert [(f.expected, f.actual, f.delta_ns, f.diagnosis) for f in one_ns] == [
        (1_500_000_000_000_000_001, 1_500_000_000_000_000_000, -1, "second-truncated")]
    # Every non-whole-second link time fails under symlink_times, never under mtime_ns/atime_ns.
    assert {f.path for f in report.result("symlink_times").failures} == {"link-to-deep"}


@pytest.mark.parametrize("fs", ["ext4-relatime", "tmpfs-strictatime", "tmpfs-relatime"])
def test_artifactkit_store_passes_every_check_on_every_corpus_tree(fs: str, mounts: Mounts) -> None:
    kind, _, options = fs.partition("-")
    if kind == "ext4":
        require_loop_devices()
    base = mounts.ext4(options) if kind == "ext4" else mounts.tmpfs(options)
    report = conformance.check("artifactkit", base=base)
    report.raise_for_failures()
    assert report.corpus == tuple(conformance.corpus_names())
    assert report.environment["source_fs"] == f"{kind} ({options})"
    assert report.environment["isolation"] == "flag"
    assert report.source_links_moved > 0  # readlink moved them: why links sit outside the source check


def test_a_source_filesystem_where_reads_never_move_atime_is_refused(mounts: Mounts) -> None:
    noatime = mounts.tmpfs("noatime")
    with pytest.raises(IsolationError, match=r"reads move atime.*remedy"):
        conformance.check(faulty.reads_source_plainly, corpus="basic", base=noatime)


def test_destination_on_a_noatime_mount_with_the_source_elsewhere_still_catches_source_reads(
        mounts: Mounts, tmpfs_strict: Path) -> None:
    noatime = mounts.tmpfs("noatime")
    report = conformance.check(faulty.reads_source_plainly, corpus="basic", base=noatime,
                               source_base=tmpfs_strict)
    assert report.failed == {"source_untouched"}
    assert report.environment["isolation"] == "noatime-mount"


def test_the_copy_runs_into_an_absent_destination_inside_the_flagged_tree(tmpfs_strict: Path) -> None:
    seen: list[tuple[bool, bool]] = []

    def spy(src: str, dst: str) -> None:
        seen.append((os.path.lexists(dst), os.path.isdir(src)))
        faulty.exact(src, dst)

    before = set(tmpfs_strict.iterdir())
    assert conformance.check(spy, corpus="basic", base=tmpfs_strict).failed == frozenset()
    assert seen == [(False, True)]
    assert set(tmpfs_strict.iterdir()) == before  # sources, destinations and the private tree are gone


def test_raise_for_failures_uses_the_shared_assertion_and_honours_require(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.drops_special_bits, corpus="edge-times", base=tmpfs_strict)
    report.raise_for_failures(require=("content", "mode", "mtime_ns"))
    assert report.holds(require=("content", "mode"))
    assert not report.passed and not report.holds()
    with pytest.raises(MetadataMismatchError) as caught:
        report.raise_for_failures()
    assert {(m.path, m.field, m.stage) for m in caught.value.context["mismatches"]} == {
        ("setuid-tool", "mode", "conformance:edge-times:special_bits"),   # 0o4755
        ("shared", "mode", "conformance:edge-times:special_bits")}        # sticky 0o1777
    with pytest.raises(ValueError, match="unknown check"):
        report.holds(require=("atime",))


def test_json_document_has_the_schema_and_exactly_the_check_names(tmpfs_strict: Path) -> None:
    doc = conformance.check(faulty.drops_atime, corpus=SMALL, base=tmpfs_strict).to_json()
    assert doc["schema"] == "artifactkit.conformance/1"
    assert [item["check"] for item in doc["checks"]] == list(conformance.CHECKS)
    assert all(set(item) == {"check", "passed", "diagnosis", "reason", "ran", "failures"} for item in doc["checks"])
    atime = next(item for item in doc["checks"] if item["check"] == "atime_ns")
    assert atime["passed"] is False
    assert atime["diagnosis"] == "atime: omitted"
    assert sum(group["count"] for group in atime["failures"]) == 9  # the 8 files of edge-times and 1 of links
    text = json.dumps(doc)
    assert str(tmpfs_strict) not in text and "/tmp" not in text  # sanitized evidence


def test_argv_templates_run_without_a_shell_and_name_both_placeholders(tmpfs_strict: Path) -> None:
    # names holds a leading dash, spaces and a 255-byte name: one argv element each, never code.
    report = conformance.check(["cp", "-a", "--", "{src}", "{dst}"], corpus="names", base=tmpfs_strict)
    assert report.failed == {"source_untouched"}  # cp -a reads the source without O_NOATIME
    with pytest.raises(CopierError, match=r"must name both \{src\} and \{dst\}"):
        argv_copier(["cp", "-a", "{src}"])


def test_a_command_failing_before_it_creates_dst_is_a_setup_error_with_its_sanitized_message(
        tmpfs_strict: Path) -> None:
    with pytest.raises(CopierCannotRunError) as caught:
        conformance.check("cp {src}/missing {dst}", corpus="basic", base=tmpfs_strict)
    detail = caught.value.detail
    assert detail.startswith("exit status 1: cp: cannot stat '{src}/missing': No such file or directory")
    assert "command: cp '{src}/missing' '{dst}'" in detail  # the full command and stderr, not an excerpt
    assert str(tmpfs_strict) not in str(caught.value)


def test_a_command_failing_after_it_created_dst_is_a_content_failure(tmpfs_strict: Path) -> None:
    report = conformance.check(["sh", "-c", 'mkdir "$1"; echo half done >&2; exit 3', "sh", "{dst}", "{src}"],
                               corpus="basic", base=tmpfs_strict)
    first = report.result("content").failures[0]
    assert (first.field, first.diagnosis, first.actual) == ("copier", conformance.COPIER_FAILED,
                                                            "exit status 3: half done")


# Two lines on stderr (the second names the source), then a third of 5,000 characters.
CHATTY = ("sh -c 'mkdir \"$1\"; printf \"first line\\nsecond names %s\\n\" \"$0\" >&2; head -c 5000 /dev/zero | tr "
          "\"\\0\" x >&2; exit 3' {src} {dst}")


def test_a_failing_command_keeps_its_full_command_and_stderr_for_json_and_an_excerpt_for_the_table(
        tmpfs_strict: Path) -> None:
    report = conformance.check(CHATTY, corpus="basic", base=tmpfs_strict)
    first = report.result("content").failures[0]
    assert first.command == shlex.join(shlex.split(CHATTY))  # the whole argv, placeholders kept
    assert first.stderr == "first line\nsecond names {src}\n" + "x" * 5000
    assert first.actual is not None and len(str(first.actual)) <= 215
    assert str(first.actual).startswith("exit status 3: first line ... xxx")
    group = report.result("content").to_json()["failures"][0]
    assert (group["diagnosis"], group["stderr"]) == (conformance.COPIER_FAILED, first.stderr)
    assert group["command"] == first.command and "{src}" in group["command"] and "{dst}" in group["command"]
    assert str(tmpfs_strict) not in json.dumps(report.to_json())


def test_a_copier_that_cannot_run_is_a_setup_error_not_a_row_of_findings(tmpfs_strict: Path) -> None:
    def restore_fails(src: str, dst: str) -> None:
        os.mkdir(dst)
        raise ToolFailedError("restore exited 1: repository is locked", command="tool restore", returncode=1,
                              stderr="repository is locked\n")

    before = set(tmpfs_strict.iterdir())
    with pytest.raises(ToolFailedError, match="repository is locked") as caught:
        conformance.check(restore_fails, corpus="basic", base=tmpfs_strict)
    assert isinstance(caught.value, CopierSetupError) and caught.value.returncode == 1
    assert set(tmpfs_strict.iterdir()) == before  # source and private tree cleaned up all the same


@pytest.mark.parametrize(("spec", "label"), [
    ("artifactkit", "artifactkit"),
    ("tests.support.faulty_copiers:exact", "tests.support.faulty_copiers:exact"),
    ("rsync -a '{src}/' {dst}", "rsync -a '{src}/' {dst}"),
])
def test_copier_specs_resolve_to_labelled_copiers(spec: str, label: str) -> None:
    copier = resolve_copier(spec)
    assert isinstance(copier, NamedCopier)
    assert copier.label == label


@pytest.mark.parametrize("spec", ["cp -a", "no_such_module_xyz:copy", "tests.support.faulty_copiers:NS",
                                  "rsync '{src} {dst}", "./copy.sh"])
def test_unusable_copier_specs_are_usage_errors(spec: str) -> None:
    with pytest.raises(CopierError):
        resolve_copier(spec)


@pytest.mark.parametrize("tree", ["basic", "links"])
def test_documented_pytest_pattern(tree: str, tmpfs_strict: Path) -> None:
    # The pattern from artifactkit.conformance.checks's docstring, as a project would write it.
    report = conformance.check(faulty.exact, corpus=[tree], base=tmpfs_strict)
    report.raise_for_failures()

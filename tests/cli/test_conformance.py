"""``artifactkit conformance`` from the outside: the table, the JSON document and the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance import corpus
from artifactkit.conformance.checks import CHECKS
from tests.support.mounts import Mounts

DROPS_ATIME = "tests.support.faulty_copiers:drops_atime"


def test_the_store_passes_and_the_table_has_one_row_per_check(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", "artifactkit", "--corpus", "basic", "--corpus", "links",
                 "--base", str(tmpfs_strict)])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and line.split()[0] in CHECKS}
    assert list(rows) == list(CHECKS)
    # basic and links hold no hard link, hole, flag, special bit, xattr or FIFO: those have no verdict (issue 50).
    unheld = {"hardlinks", "inode_flags", "sparse", "special_bits", "special_files", "xattrs"}
    assert {name for name, line in rows.items() if line.split()[1] == "pass"} == set(CHECKS) - unheld
    assert all("not run (not run: no tree checked here holds what it checks (checked: basic, links))" in rows[name]
               for name in unheld)
    assert "corpus: basic, links" in out and "all required checks hold" in out


def test_a_failing_check_exits_1_and_its_cell_shows_the_first_diagnosis(
        tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", DROPS_ATIME, "--corpus", "edge-times", "--base", str(tmpfs_strict)])
    out = capsys.readouterr().out
    assert code == 1
    cells = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and line.split()[0] in CHECKS}
    assert "FAIL atime: omitted" in cells["atime_ns"]
    assert "FAIL atime: omitted" in cells["dir_times"] and "edge-times: ." in cells["dir_times"]
    assert cells["mtime_ns"].split()[1] == "pass"


def test_require_decides_the_exit_code(tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", "--copier", DROPS_ATIME, "--corpus", "basic", "--base", str(tmpfs_strict)]
    assert main([*argv, "--require", "content,mode,mtime_ns"]) == 0
    assert "atime_ns (not required)" in capsys.readouterr().out
    assert main([*argv, "--require", "mtime_ns,atime_ns"]) == 1
    # basic holds no setuid, setgid or sticky bit: requiring special_bits of it is no pass (issue 50).
    assert main([*argv, "--require", "content,mode,special_bits,mtime_ns"]) == 1
    assert "a required check did not run: special_bits (not run: no tree checked here" in capsys.readouterr().out


def test_json_prints_the_conformance_document(tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # basic, not special-modes: a normal user cannot read special-modes' mode-000 file, so that tree
    # is "not run" and every check would pass; the document's shape is the point here.
    code = main(["conformance", "--copier", "cp -a {src} {dst}", "--corpus", "basic",
                 "--base", str(tmpfs_strict), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["schema"] == "artifactkit.conformance/1"
    assert doc["copier"] == "cp -a {src} {dst}"
    assert [item["check"] for item in doc["checks"]] == list(CHECKS)
    failed = {item["check"]: item for item in doc["checks"] if item["passed"] is False}
    assert set(failed) == {"source_untouched"}
    assert {item["check"] for item in doc["checks"] if item["passed"] is None and not item["ran"]} == {
        "hardlinks", "inode_flags", "sparse", "special_bits", "special_files", "symlink_times", "xattrs"}
    assert failed["source_untouched"]["diagnosis"] == \
        "atime: advanced-by-read, source atime moved by the copy"
    assert str(tmpfs_strict) not in json.dumps(doc)


@pytest.mark.parametrize("argv", [
    ["--copier", "cp -a"],                                           # no placeholders
    ["--copier", "no_such_module_xyz:copy"],                         # not importable
    ["--copier", "artifactkit", "--require", "atime"],               # not a check name
    ["--copier", "artifactkit", "--corpus", "no-such-tree"],
    [],                                                              # --copier is required
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", *argv]) == 2
    assert capsys.readouterr().err


def test_a_source_where_reads_never_move_atime_is_a_setup_error(
        mounts: Mounts, capsys: pytest.CaptureFixture[str]) -> None:
    noatime = mounts.tmpfs("noatime")
    assert main(["conformance", "--copier", "artifactkit", "--corpus", "basic", "--base", str(noatime)]) == 2
    assert "remedy" in capsys.readouterr().err


def test_the_installed_command_is_quiet_in_a_pipe_and_finds_project_copiers(tmpfs_strict: Path) -> None:
    # -P keeps the current directory off sys.path, as for the console script: module:function
    # must still resolve from it.
    done = subprocess.run(
        [sys.executable, "-P", "-c", "from artifactkit.cli.main import main; raise SystemExit(main())", "conformance",
         "--copier", "tests.support.faulty_copiers:exact", "--corpus", "basic", "--base", str(tmpfs_strict)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as an ordinary user sees it: a mode-000 file cannot be read back."""
    monkeypatch.setattr(corpus, "can_read_unreadable", lambda: False)


@pytest.mark.usefixtures("not_root")
def test_a_tree_that_needs_root_is_not_run_for_a_normal_user_and_the_store_still_passes(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", "artifactkit", "--corpus", "basic", "--corpus", "special-modes",
                 "--base", str(fast_tmp), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["corpora"] == [{"corpus": "basic", "passed": True, "reason": None},
                              {"corpus": "special-modes", "passed": None, "reason": "not run: needs root"}]
    # What neither tree holds (basic alone for a normal user) has no verdict, never a pass (issue 50).
    assert all(item["passed"] is (True if item["ran"] else None) for item in doc["checks"])
    assert {item["check"] for item in doc["checks"] if not item["ran"]} >= {"hardlinks", "sparse", "xattrs"}


@pytest.mark.usefixtures("not_root")
def test_when_no_tree_can_run_every_check_is_null_with_its_reason_never_a_pass(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", "--copier", "artifactkit", "--corpus", "special-modes", "--base", str(fast_tmp)]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(item["passed"], item["reason"]) for item in doc["checks"]} == {
        (None, "special-modes: not run: needs root")}
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert " pass" not in out and "not run: special-modes (not run: needs root)" in out


def test_the_default_corpus_passes_for_whoever_runs_it(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # As root every tree runs; as a normal user special-modes is "not run", never a failure.
    assert main(["conformance", "--copier", "artifactkit", "--base", str(fast_tmp)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("copier", [
    "no-such-tool-xyz {src} {dst}",                                        # missing program
    "sh -c 'for i in 1 2 3; do echo line $i of the story >&2; done; exit 7' sh {src} {dst}",  # before {dst}
])
def test_a_copier_that_cannot_run_is_a_setup_error_with_its_whole_stderr_and_no_pass(
        copier: str, fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--copier", copier, "--corpus", "basic", "--base", str(fast_tmp)])
    captured = capsys.readouterr()
    assert code == 2
    assert "pass" not in captured.out
    assert "cannot run" in captured.err
    if "story" in copier:
        assert [n for n in "123" if f"line {n} of the story" in captured.err] == ["1", "2", "3"]

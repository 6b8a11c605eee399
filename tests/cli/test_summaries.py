"""A refusal that concerns many entries: a summary within one screen on stderr, every entry in ``--json``."""

from __future__ import annotations

import json

import pytest

from artifactkit.cli.common import SUMMARY_ENTRIES
from artifactkit.cli.result import failure, render
from artifactkit.errors import NotRestorableError, UnsafePathError


def report_error(err: BaseException, *, json_output: bool = False) -> int:
    """What a command does with an error it expects: one result, rendered."""
    return render(failure(err), json_output=json_output)

PROBLEMS = [f"usr/share/doc/pkg{i}/copyright: owner 0:0 (this user is 1000)" for i in range(2000)] + [
    f"usr/bin/tool{i}: owner 0:0 (this user is 1000), xattr security.capability" for i in range(29)]


def _refusal() -> NotRestorableError:
    return NotRestorableError("download refused: this user cannot restore everything the manifest records:\n  "
                              + "\n  ".join(PROBLEMS), entries=PROBLEMS)


def test_a_refusal_of_2029_entries_is_one_screen_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error(_refusal()) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 400 for line in lines), f"{len(err)} bytes, {len(lines)} lines"
    assert "2029 entries" in err and "--json" in err
    assert all(problem in err for problem in PROBLEMS[:SUMMARY_ENTRIES])
    assert PROBLEMS[SUMMARY_ENTRIES] not in err
    assert "by kind: 2000 owner 0:0 (this user is 1000); 29 owner 0:0 (this user is 1000), xattr" in err


def test_the_same_refusal_under_json_lists_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error(_refusal(), json_output=True) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["fields"]["entries"] == PROBLEMS
    assert doc["type"] == "NotRestorableError" and doc["exit_code"] == 2


def test_a_short_refusal_is_still_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error(UnsafePathError("manifest: path '../x' contains '..'", path="../x")) == 2
    assert capsys.readouterr().err == "artifactkit: error: manifest: path '../x' contains '..'\n"


def test_a_message_of_a_few_entries_stays_whole_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    few = PROBLEMS[:3]
    report_error(NotRestorableError("download refused:\n  " + "\n  ".join(few), entries=few))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(problem in err for problem in few)

"""The README's command-line example of the store, run line by line as it stands there."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from artifactkit.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def _example_lines() -> list[list[str]]:
    text = README.read_text()
    block = re.search(r"The store from the command line.*?```sh\n(.*?)```", text, re.S)
    assert block, "the README's store example is gone"
    return [shlex.split(line, comments=True) for line in block[1].splitlines() if line.strip()]


def test_the_readmes_store_example_runs_and_each_command_says_ok(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(fast_tmp)
    (fast_tmp / "data").mkdir()
    (fast_tmp / "data" / "a.txt").write_text("one")
    lines = _example_lines()
    assert [argv[:2] for argv in lines] == [["artifactkit", c] for c in
                                          ("publish", "ls", "download", "verify", "forget", "gc")]
    publish = lines[0][1:]
    assert main(publish) == 0
    (fast_tmp / "data" / "a.txt").write_text("two")  # "again after a change: version 2"
    assert main(publish) == 0
    for argv in lines[1:]:
        assert main(argv[1:]) == 0, (argv, capsys.readouterr())
    out = capsys.readouterr().out
    assert "forgot 1 version(s): demo@1" in out
    assert (fast_tmp / "out" / "a.txt").read_text() == "one"

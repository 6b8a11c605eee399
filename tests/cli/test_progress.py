"""Progress on a terminal only: the CLI under a pseudo-terminal shows it, in a pipe and under --json it is silent."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit.conformance.corpus import materialize


def _run(argv: list[str], *, stderr_tty: bool) -> tuple[int, str, bytes]:
    """Run the CLI; stderr on a pty's slave end (a terminal) or a pipe; return (exit, stdout, stderr bytes)."""
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    if not stderr_tty:
        done = subprocess.run([sys.executable, "-m", "artifactkit.cli", *argv], capture_output=True, env=env,
                              check=False)
        return done.returncode, done.stdout.decode(), done.stderr
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "artifactkit.cli", *argv], stdout=subprocess.PIPE,
                                   stderr=slave, env=env)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal's last slave end
                break
            if not chunk:
                break
            seen += chunk
        out = process.stdout.read().decode() if process.stdout else ""
        return process.wait(), out, seen
    finally:
        os.close(master)


#: What each command's progress line says.
WHAT = {"publish": b"publishing", "download": b"downloading", "verify": b"verify: hashing", "gc": b"gc: sweeping"}


@pytest.fixture
def site(fast_tmp: Path) -> Path:
    materialize("basic", fast_tmp / "src")
    return fast_tmp


@pytest.mark.parametrize("command", ["publish", "download", "verify", "gc"])
def test_a_long_command_shows_progress_on_a_terminal_and_nothing_in_a_pipe(site: Path, command: str) -> None:
    store = str(site / "store")
    publish = ["publish", str(site / "src"), "--store", store, "--name", "demo"]
    argv = {"publish": publish, "download": ["download", "demo", str(site / "out"), "--store", store],
            "verify": ["verify", "--store", store], "gc": ["gc", "--store", store]}[command]
    if command != "publish":
        assert _run(publish, stderr_tty=False)[0] == 0
    code, out, err = _run(argv, stderr_tty=True)
    assert code == 0, err
    assert b"\x1b[" in err and WHAT[command] in err, err
    assert out and "\x1b" not in out, "stdout (a pipe) gets the result only"
    if command == "download":
        os.rename(site / "out", site / "out1")
    code, out, err = _run(argv, stderr_tty=False)
    assert (code, err) == (0, b""), "a pipe gets no progress"


@pytest.mark.parametrize("command", ["publish", "download", "verify", "gc", "ls"])
def test_json_on_a_terminal_shows_no_progress_and_stdout_is_one_document(site: Path, command: str) -> None:
    store = str(site / "store")
    publish = ["publish", str(site / "src"), "--store", store, "--name", "demo"]
    if command != "publish":
        assert _run(publish, stderr_tty=False)[0] == 0
    argv = {"publish": publish, "download": ["download", "demo", str(site / "out"), "--store", store],
            "verify": ["verify", "--store", store], "gc": ["gc", "--store", store], "ls": ["ls", "--store", store]}
    code, out, err = _run([*argv[command], "--json"], stderr_tty=True)
    assert (code, err) == (0, b"")
    assert json.loads(out)["schema"] == f"artifactkit.{command}/1"


def test_an_error_on_a_terminal_under_json_is_one_line_and_one_document(site: Path) -> None:
    """The error's line on the terminal (no progress left on it), its document on stdout."""
    code, out, err = _run(["verify", "--store", str(site / "typo"), "--json"], stderr_tty=True)
    assert code == 2 and err.count(b"\n") == 1 and b"\x1b" not in err, err
    assert json.loads(out)["type"] == "NotAStoreError"


@pytest.mark.parametrize(("argv", "what"), [
    (["diagnose", "--cycles", "3", "--isolation", "none", "--copier", "shutil"], b"cycles"),
    (["conformance", "--copier", "artifactkit", "--corpus", "basic"], b"conformance of artifactkit"),
], ids=["diagnose", "conformance"])
def test_diagnose_and_conformance_show_the_same_progress_on_a_terminal_only(
        site: Path, argv: list[str], what: bytes) -> None:
    argv = [*argv, "--base", str(site)]
    code, _, err = _run(argv, stderr_tty=True)
    assert code in (0, 1), err  # 1: mismatches found (shutil drops atimes), not a setup error
    assert b"\x1b[" in err and what in err, err
    code, _, err = _run(argv, stderr_tty=False)
    assert code in (0, 1) and err == b"", "a pipe gets no progress"

"""``artifactkit diagnose`` from the outside: exit codes, JSON evidence, summary, and Ctrl-C."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from artifactkit.cli.main import build_parser, main
from artifactkit.testing.mounts import Mounts
from artifactkit.trace.evidence import TOP_LEVEL_KEYS, violations

REPO = Path(__file__).resolve().parents[2]


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["diagnose", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_isolated_run_exits_0_with_ten_clean_checks(ext4_relatime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _run_json(capsys, "--cycles", "5", "--interval-ms", "1", "--readers", "4",
                          "--base", str(ext4_relatime))
    assert code == 0
    assert tuple(sorted(doc)) == tuple(sorted(TOP_LEVEL_KEYS))
    assert doc["schema"] == "artifactkit.diagnose/1"
    assert (doc["cycles"], doc["checks"], doc["mismatches"]) == (5, 10, [])
    assert doc["interval_ns"] == 1_000_000
    assert isinstance(doc["competing_reads"], int)
    assert doc["competing_reads"] > 0
    inotify = doc["inotify"]
    assert isinstance(inotify, dict)
    assert sum(inotify.values()) > 0
    env = doc["environment"]
    assert isinstance(env, dict)
    assert env["isolation"]["mode"] == "flag"
    assert env["fs_type"] == "ext4"
    assert violations(doc) == []


def test_control_run_exits_1_with_advanced_by_read(ext4_relatime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _run_json(capsys, "--cycles", "2", "--isolation", "none", "--base", str(ext4_relatime))
    assert code == 1
    mismatches = doc["mismatches"]
    assert isinstance(mismatches, list)
    assert mismatches
    assert {m["diagnosis"] for m in mismatches} == {"advanced-by-read"}
    assert all({"path", "field", "stage", "diagnosis"} <= set(m) for m in mismatches)


def test_shutil_summary_says_the_source_atime_moved(ext4_relatime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", "--cycles", "2", "--isolation", "none", "--copier", "shutil",
                 "--base", str(ext4_relatime)])
    captured = capsys.readouterr()
    assert code == 1
    lines = captured.out.splitlines()
    assert any(line.split() == ["source", "atime", "moved", "yes"] for line in lines), captured.out
    assert any(line.startswith("mismatches: advanced-by-read") for line in lines)
    assert any(line.startswith("accesses: unexplained") for line in lines)
    assert "verified how" in captured.out
    assert "diagnose [" not in captured.err  # no progress bar in a pipe


def test_ramfs_with_flag_isolation_exits_2_naming_the_remedy(mounts: Mounts,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", "--cycles", "1", "--isolation", "flag", "--base", str(mounts.ramfs())])
    err = capsys.readouterr().err
    assert code == 2
    assert "ramfs" in err
    assert "remedy:" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--cycles", "0"]) == 2
    assert "cycles must be >= 1" in capsys.readouterr().err
    assert main(["diagnose", "--isolation", "sometimes"]) == 2


def test_defaults_run_on_the_system_temp_dir(ext4_relatime: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["diagnose"])
    assert (args.cycles, args.interval_ms, args.readers, args.isolation, args.copier, args.base) == (
        50, 1, 4, "auto", "store", None)
    monkeypatch.setattr(tempfile, "tempdir", str(ext4_relatime))
    code, doc = _run_json(capsys, "--cycles", "1", "--readers", "1")
    assert code == 0
    assert doc["environment"]["fs_type"] == "ext4"  # type: ignore[index]


def test_output_writes_the_same_sanitized_evidence(ext4_relatime: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "evidence.json"
    code, doc = _run_json(capsys, "--cycles", "1", "--readers", "1", "--base", str(ext4_relatime),
                          "--output", str(target))
    assert code == 0
    written = json.loads(target.read_text(encoding="utf-8"))
    written["environment"]["run"].pop("duration_ms")
    doc["environment"]["run"].pop("duration_ms")  # type: ignore[index]
    assert written == doc
    text = target.read_text(encoding="utf-8")
    assert str(ext4_relatime) not in text
    assert violations(written) == []


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _restore_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and exec keeps that: undo it so the
    # child behaves like a command in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_stops_readers_and_watcher_and_leaves_no_process(ext4_relatime: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "artifactkit.cli.main", "diagnose", "--cycles", "100000", "--readers", "4",
         "--base", str(ext4_relatime), "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_restore_sigint)  # noqa: PLW1509 - only signal() runs between fork and exec
    try:
        deadline = time.monotonic() + 60
        readers: list[int] = []
        while len(readers) < 4:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the readers never started"
            readers = [p for p in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
            time.sleep(0.02)  # waiting for the run to reach its cycles, not for a result
        family = _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert "Traceback" not in err
    for pid in family:
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone and reaped
        try:
            # The resource tracker ends when it sees its parent's pipe close, just after the exit.
            ready, _, _ = select.select([pidfd], [], [], 10)
            assert ready, f"pid {pid} survived the interrupted run"
        finally:
            os.close(pidfd)
    assert not any(p.name.startswith("artifactkit-") for p in ext4_relatime.iterdir())

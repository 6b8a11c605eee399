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
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from artifactkit.cli.diagnose import MAX_GROUP_ROWS, WIDTH, group_rows, printable, render
from artifactkit.cli.main import build_parser, main
from artifactkit.trace.attribution import AccessGroup
from artifactkit.trace.engine import DiagnoseConfig, DiagnoseResult, run_diagnose
from artifactkit.trace.evidence import TOP_LEVEL_KEYS, to_evidence, violations
from artifactkit.trace.tracer import HoldStats, PidAccesses
from tests.support.capability import require_holding_openers
from tests.support.mounts import Mounts

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
    # Reads did it. With fanotify's hold a read can land just after the store's own utime during a
    # download, and then looks like an omitted time (see the engine's control-run test).
    assert "advanced-by-read" in {m["diagnosis"] for m in mismatches}
    assert all(m["diagnosis"] == "advanced-by-read" or (m["diagnosis"], m["stage"]) == ("omitted", "download")
               for m in mismatches), mismatches
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


def _cmdline(pid: int) -> bytes:
    """A process's command line, empty once it has exited (a short-lived child can go between the listing
    and this read: seen as FileNotFoundError on /proc/<pid>/cmdline)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


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
            readers = [p for p in _children(proc.pid) if b"spawn_main" in _cmdline(p)]
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


# -- outside readers in the summary ------------------------------------------------------------------

HOLD = HoldStats("permission", 5000, 70, 0, 420, 9000, 5, 2000)


@pytest.fixture(scope="module")
def quiet_result(tmp_path_factory: pytest.TempPathFactory) -> DiagnoseResult:
    """One cheap real run, no fanotify: the summaries below swap in the accesses they are about."""
    base = tmp_path_factory.mktemp("render")
    return run_diagnose(DiagnoseConfig(cycles=1, readers=1, base=str(base), fanotify=False))


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_evidence_and_the_summary_name_the_engine_the_cycles_ran_on(
        engine: str, tmp_path: Path, use_engine: Callable[[str], None]) -> None:
    use_engine(engine)
    result = run_diagnose(DiagnoseConfig(cycles=1, readers=1, base=str(tmp_path), fanotify=False))
    threads = len(os.sched_getaffinity(0)) if engine == "native" else None
    assert to_evidence(result)["environment"]["engine"] == {
        "name": engine, "threads": threads, "selected": True, "usable": True, "problem": ""}
    said = f"{engine}, {threads} thread{'s' if threads != 1 else ''}" if threads is not None else engine
    rows = [" ".join(line.split()) for line in render(result).splitlines()]
    assert f"engine {said}, selected by ARTIFACTKIT_ENGINE" in rows, rows


def _with_strangers(result: DiagnoseResult, strangers: list[PidAccesses]) -> DiagnoseResult:
    acc = attrs.evolve(result.accesses, method="fanotify", attributed=tuple(strangers), hold=HOLD,
                       unexplained=sum(s.events for s in strangers))
    return attrs.evolve(result, accesses=acc)


def _strangers() -> list[PidAccesses]:
    cats = [PidAccesses(1000 + i, "cat", 2, ("bash", "sh", "find")) for i in range(57)]
    finds = [PidAccesses(2000 + i, "find", 3, ("bash", "sh")) for i in range(13)]
    others = [PidAccesses(3000 + i, f"indexer-{i}", 1, ("systemd", "some-very-long-service-manager-name",
                                                         "another-long-supervisor-process")) for i in range(10)]
    return cats + finds + others


def test_outside_processes_are_summed_up_by_group_in_one_screen(quiet_result: DiagnoseResult) -> None:
    text = render(_with_strangers(quiet_result, _strangers()), "/srv/base")
    lines = text.splitlines()
    assert len(lines) <= 40
    assert max(len(line) for line in lines) <= WIDTH, text
    rows = [line.strip() for line in lines]
    assert any(row.startswith("bash → sh → find → cat") and row.endswith("57 processes, 114 events")
               for row in rows), text
    assert any(row.startswith("bash → sh → find") and row.endswith("13 processes, 39 events") for row in rows)
    assert sum(1 for row in rows if row.endswith(("process, 1 event", "processes, 1 event"))) == MAX_GROUP_ROWS - 2
    assert any(row.startswith("…") and row.endswith("4 more groups (--json)") for row in rows), text
    assert "163 events by 80 outside processes in 12 groups:" in text
    assert "fanotify, held until named: 70 waited, max 0.4 ms" in text
    assert "pid 1000" not in text  # per-process details are the JSON's


def test_a_long_chain_keeps_its_nearest_names() -> None:
    group = AccessGroup(("systemd", "some-very-long-service-manager-name", "another-long-supervisor-process"),
                        "indexer", 1, 1)
    rows = group_rows([group])
    assert rows[0][0].strip() == "… → indexer"
    assert group_rows([AccessGroup(("a", "b"), "cat", 1, 1)])[0][0].strip() == "a → b → cat"


def test_a_terminal_without_arrows_gets_ascii_ones() -> None:
    assert printable("sh → find … (--json)", "latin-1") == "sh -> find ... (--json)"
    assert printable("sh → find", "utf-8") == "sh → find"


def test_the_outside_find_cat_loop_is_named_in_summary_and_evidence(tmpfs_relatime: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # The acceptance, as a user would run it: the loop from the issue, diagnose beside it.
    require_holding_openers()
    base = Path(tempfile.mkdtemp(prefix="outside-", dir=tmpfs_relatime))
    # Paced like the engine test's loop, so it leaves the tests beside it a core.
    loop = subprocess.Popen(["sh", "-c", 'while :; do find "$1" -type f -exec cat {} + > /dev/null 2>&1; sleep 0.01; '
                             "done", "sh", str(base)], start_new_session=True)
    evidence = tmp_path / "evidence.json"
    try:
        code = main(["diagnose", "--base", str(base), "--cycles", "5", "--readers", "2", "--output", str(evidence)])
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
        subprocess.run(["rm", "-rf", str(base)], check=True)
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads(evidence.read_text(encoding="utf-8"))
    assert "unknown (exited)" not in out
    assert "unknown (exited)" not in evidence.read_text(encoding="utf-8")
    lines = out.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= WIDTH, out
    acc = doc["accesses"]
    assert acc["hold"]["mode"] == "permission"
    assert {p["executable"] for p in acc["attributed"]} == {"find", "cat"}
    assert {p["named"] for p in acc["attributed"]} == {"held"}
    cat = next(g for g in acc["groups"] if g["executable"] == "cat")
    assert cat["chain"][-1] == "find" and cat["processes"] >= 1
    label = group_rows([AccessGroup(tuple(cat["chain"]), "cat", cat["processes"], cat["events"])])[0][0].strip()
    assert any(line.strip().startswith(label) for line in lines), out
    assert all(p["cmdline"].startswith(("find '<base>'", "cat '<work>/")) for p in acc["attributed"]), acc
    assert violations(doc) == []

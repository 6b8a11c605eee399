"""The holder process, driven as diagnose drives it: short-lived readers named, nobody ever left waiting."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit.trace.procnames import UNKNOWN_EXITED
from artifactkit.trace.tracer import HELD, OWN_MOUNT, FanotifyReport, start_tracer
from tests.support.capability import require_fanotify, require_holding_openers

#: Debian's sh is dash: /proc/PID/exe names the binary that runs, not the name it was called by.
SH = os.path.basename(os.path.realpath(shutil.which("sh") or "/bin/sh"))


@pytest.fixture
def traced(tmpfs_relatime: Path) -> Iterator[Path]:
    """Three files in a directory of their own on this session's tmpfs (a mount nobody else uses)."""
    require_holding_openers()
    path = Path(tempfile.mkdtemp(prefix="tracer-", dir=tmpfs_relatime))
    for name in ("a", "b", "c"):
        (path / name).write_bytes(name.encode())
    yield path
    shutil.rmtree(path)


def _find_cat(directory: Path) -> list[str]:
    return ["sh", "-c", f"find '{directory}' -type f -exec cat {{}} + > /dev/null"]


def _by_executable(report: FanotifyReport, executable: str) -> list[object]:
    return [item for item in report.by_pid if item.executable == executable]


def test_a_short_lived_find_cat_is_named_with_its_parent_chain(traced: Path) -> None:
    tracer = start_tracer([traced], budget_ms=10_000)  # naming, not the budget, is the point here
    assert tracer.mode == "permission" and tracer.status == f"{HELD}; {OWN_MOUNT}"
    subprocess.run(_find_cat(traced), check=True)
    report = tracer.stop()
    outside = [item for item in report.by_pid if item.pid != os.getpid()]
    assert {item.executable for item in outside} == {"find", "cat"}
    assert all(item.named == "held" and item.complete for item in outside)
    cat = next(item for item in outside if item.executable == "cat")
    assert cat.chain[-2:] == (SH, "find")
    assert cat.argv[:1] == ("cat",) and all(str(traced) in arg for arg in cat.argv[1:])
    assert cat.events >= 3  # three files opened and read
    assert report.hold.named_while_held == 2
    assert report.overflows == 0


@pytest.mark.parametrize("hold", [True, False], ids=["held", "notification-only"])
def test_a_stalled_holder_names_the_reader_only_when_it_holds(traced: Path, hold: bool) -> None:
    # The regression check for the hold itself: the holder is stopped while find and cat run.
    # Held, they cannot get past their first open until it is back, and are named; without the
    # hold they come and go unseen, and by the time their events are read they are "unknown (exited)".
    tracer = start_tracer([traced], hold=hold, watchdog_ms=60_000)
    os.kill(tracer.pid, signal.SIGSTOP)
    pipeline = subprocess.Popen(_find_cat(traced))
    try:
        if hold:
            with pytest.raises(subprocess.TimeoutExpired):
                pipeline.wait(timeout=0.5)
        else:
            assert pipeline.wait(timeout=30) == 0
    finally:
        os.kill(tracer.pid, signal.SIGCONT)
    assert pipeline.wait(timeout=30) == 0
    report = tracer.stop()
    executables = {item.executable for item in report.by_pid if item.pid != os.getpid()}
    if hold:
        assert executables == {"find", "cat"}
    else:
        assert executables == {UNKNOWN_EXITED}
        assert "notification only: holding disabled" in tracer.status


@pytest.mark.parametrize("own_mount", [True, False], ids=["tree-mount", "whole-mount"])
def test_only_the_traced_tree_is_held_when_it_has_a_mount_of_its_own(traced: Path, own_mount: bool) -> None:
    # The base is often /: with the whole mount marked, every open of the machine would wait on the
    # holder. With the tree bound onto itself, an open beside it does not wait at all.
    beside = traced.parent / f"{traced.name}-beside"
    beside.write_bytes(b"x")
    tracer = start_tracer([traced], own_mount=own_mount)
    os.kill(tracer.pid, signal.SIGSTOP)
    try:
        cat = subprocess.Popen(["cat", str(beside)], stdout=subprocess.PIPE)
        if own_mount:
            assert cat.communicate(timeout=30) == (b"x", None)
        else:
            with pytest.raises(subprocess.TimeoutExpired):
                cat.wait(timeout=0.5)
    finally:
        os.kill(tracer.pid, signal.SIGCONT)
    cat.communicate(timeout=30)
    tracer.stop()
    beside.unlink()
    assert not os.path.ismount(traced)  # the tree's own mount went with the tracer
    assert ("only the traced tree is marked" in tracer.status) == own_mount


def test_our_own_opens_are_answered_and_counted_but_not_named(traced: Path) -> None:
    with start_tracer([traced]) as tracer:
        assert (traced / "a").read_bytes() == b"a"
        report = tracer.stop()
    ours = [item for item in report.by_pid if item.pid == os.getpid()]
    assert [(item.named, item.chain, item.argv) for item in ours] == [("self", (), ())]
    assert ours[0].events >= 1
    assert report.hold.named_while_held == 0


def test_a_killed_holder_lets_the_waiting_opener_through_and_stop_says_so(traced: Path) -> None:
    tracer = start_tracer([traced])
    os.kill(tracer.pid, signal.SIGSTOP)
    cat = subprocess.Popen(["cat", str(traced / "a")], stdout=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        cat.wait(timeout=0.3)  # held: the holder cannot answer
    os.kill(tracer.pid, signal.SIGKILL)
    assert cat.communicate(timeout=30) == (b"a", None)
    with pytest.raises(RuntimeError, match=r"killed by SIGKILL.*let every held opener through"):
        tracer.stop()


# The holder as started by start_tracer, but its naming stuck for good (as a /proc read of a
# process in trouble could be): only the watchdog can end it.
STUCK_HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from artifactkit.trace import holder
def stuck(pid, **kw):
    time.sleep(3600)
holder.name_process = stuck
raise SystemExit(holder.main(sys.argv[2:]))
"""


def test_a_stuck_holder_is_ended_by_its_watchdog_and_the_opener_goes_on(traced: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-I", "-c", STUCK_HOLDER, root, str(traced), "--own", str(os.getpid()),
                             "--watchdog-ms", "300"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert b'"ready"' in proc.stdout.readline()
        began = time.monotonic()
        cat = subprocess.run(["cat", str(traced / "a")], capture_output=True, timeout=30, check=True)
        assert cat.stdout == b"a"
        assert proc.wait(timeout=30) == -signal.SIGALRM
        assert time.monotonic() - began < 10
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_where_the_mount_refuses_permission_events_it_falls_back_and_says_why() -> None:
    require_fanotify()
    tracer = start_tracer(["/proc/self"])  # procfs: EINVAL for FAN_OPEN_PERM, notifications are fine
    assert tracer.mode == "notification"
    assert "notification only: this mount refuses FAN_OPEN_PERM: Invalid argument" in tracer.status
    assert tracer.stop().hold.permission_events == 0


def test_start_tracer_needs_a_directory() -> None:
    with pytest.raises(ValueError, match="at least one directory"):
        start_tracer([])

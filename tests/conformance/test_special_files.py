"""The ``special-files`` corpus tree and the ``special_files`` check (issue 27): FIFOs everywhere, device nodes
where this process may make them ("not run: needs root" otherwise), and a copier that blocks on a FIFO is
stopped by the timeout and reported, never a hang."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from artifactkit.conformance import checks as conformance
from artifactkit.conformance.copiers import TIMEOUT_SETTING
from artifactkit.conformance.corpus import can_make_devices, load_tree, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata.model import DEVICE_KINDS, SPECIAL_KINDS
from tests.support import faulty_copiers as faulty
from tests.support.capability import require_real_root

TREE = "special-files"


def test_the_tree_holds_fifos_a_hard_linked_fifo_the_whiteout_and_devices_all_with_historical_ns_times() -> None:
    entries = load_tree(TREE).entries
    kinds = {e.kind for e in entries}
    assert kinds >= SPECIAL_KINDS
    assert any(e.kind == "fifo" and e.hardlink is not None for e in entries)
    assert any(e.kind == "char" and e.rdev == (0, 0) for e in entries)
    assert all(e.mtime_ns % 1000 and e.atime_ns % 1000 and e.mtime_ns < 1_700_000_000 * 10**9 for e in entries)


def test_materialize_builds_the_devices_only_where_they_can_be_made(fast_tmp: Path) -> None:
    supplied = materialize(TREE, fast_tmp / "src")
    built = {e.path: e for e in capture_tree(fast_tmp / "src")}
    assert {e.path for e in supplied} == set(built)
    devices = {e.path for e in load_tree(TREE).entries if e.kind in DEVICE_KINDS and e.rdev != (0, 0)}
    assert (devices <= set(built)) == can_make_devices()
    for entry in supplied:
        assert (built[entry.path].kind, built[entry.path].rdev, built[entry.path].mode) == \
            (entry.kind, entry.rdev, entry.mode)


def test_cp_a_passes_special_files(tmpfs_strict: Path) -> None:
    report = conformance.check("cp -a {src} {dst}", corpus=TREE, base=tmpfs_strict)
    result = report.result("special_files")
    assert not result.failures, [f.headline() for f in result.failures]
    # Its reads of the source (directory listings) are another check's business: source_untouched.
    assert report.failed <= {"source_untouched"}
    if can_make_devices():
        assert result.passed is True
    else:
        assert (result.passed, result.reason) == (None, "not run on the device nodes of special-files: needs root")


def test_the_store_passes_special_files(tmpfs_strict: Path) -> None:
    require_real_root("create device nodes")
    report = conformance.check("artifactkit", corpus=TREE, base=tmpfs_strict)
    report.raise_for_failures()
    assert report.result("special_files").passed is True


def test_a_copier_that_drops_devices_fails_special_files_with_missing(tmpfs_strict: Path) -> None:
    require_real_root("create device nodes")
    report = conformance.check(faulty.drops_devices, corpus=TREE, base=tmpfs_strict)
    assert report.failed == {"special_files"}
    devices = {e.path for e in load_tree(TREE).entries if e.kind in DEVICE_KINDS}
    missing = {f.path for f in report.result("special_files").failures if f.diagnosis == "missing"}
    assert missing == devices
    assert report.result("special_files").diagnosis == "presence: missing"


def test_a_copier_that_opens_a_fifo_is_stopped_by_the_timeout_and_reported_as_a_copier_failure(
        tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cp --copy-contents reads special files as if they were regular: it blocks on the FIFO's open forever.
    monkeypatch.setenv(TIMEOUT_SETTING, "2")
    done: list[conformance.Report] = []
    worker = threading.Thread(target=lambda: done.append(conformance.check(
        "cp -r --copy-contents {src} {dst}", corpus=TREE, base=tmpfs_strict)), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(60)
    assert done, "the conformance run hung on the copier"
    assert time.monotonic() - start < 60
    failures = [f for f in done[0].result("content").failures if f.diagnosis == conformance.COPIER_FAILED]
    assert len(failures) == 1
    assert "timed out after 2 s" in str(failures[0].actual) and "killed" in str(failures[0].actual)
    assert failures[0].command == "cp -r --copy-contents '{src}' '{dst}'"


def test_an_in_process_copier_blocked_opening_a_fifo_is_released_and_reported(
        tmpfs_strict: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ZipFile.write opens the FIFO it is given and blocked for good: it cannot be killed, so it is released.
    # Released, it goes on to the whiteout, whose open fails (ENXIO) before {dst}: the tree is "not run".
    monkeypatch.setenv(TIMEOUT_SETTING, "1")
    done: list[conformance.Report] = []
    worker = threading.Thread(target=lambda: done.append(conformance.check(
        "zipfile", corpus=TREE, base=tmpfs_strict, raise_if_none_ran=False)), daemon=True)
    worker.start()
    worker.join(60)
    assert done, "the conformance run hung on the zipfile adapter"
    ((tree, reason),) = done[0].not_run
    assert tree == TREE
    assert reason.startswith(
        "not run: the copier failed before creating {dst}: timed out after 1 s blocked opening FIFO(s) "
        "run/control as files; the kit released each by opening it for writing once"), reason  # via 'status'
    assert _whiteout_open_error(tmpfs_strict) in reason


def _whiteout_open_error(base: Path) -> str:
    """What opening a whiteout (char 0,0) answers on ``base``'s mount, found by trying: ENXIO where device
    nodes may be opened, EACCES on a nodev mount (a tmpfs mounted in a user namespace is one)."""
    probe = base / f"whiteout-probe-{os.getpid()}"
    os.mknod(probe, stat.S_IFCHR | 0o600, 0)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as err:
        return err.strerror
    finally:
        probe.unlink()
    raise AssertionError("a whiteout opened: it names no device")

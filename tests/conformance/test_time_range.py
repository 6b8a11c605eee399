"""Issue 50 item 6: the corpus covers each filesystem's real time range (the probe measures it), so a tool that
clamps or wraps a time the filesystem holds is caught, and nothing is asked that the filesystem cannot hold."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from artifactkit.conformance import checks as conformance
from artifactkit.conformance.corpus import load_tree, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.isolation.probe import probe_atime
from artifactkit.isolation.time_range import STORE_HIGHEST_S, STORE_LOWEST_S, TimeRange
from artifactkit.metadata import drift as dx
from tests.support import faulty_copiers as faulty
from tests.support.capability import require_loop_devices, require_tool
from tests.support.mounts import Mounts

NS = 1_000_000_000
TIME_CHECKS = ("mtime_ns", "atime_ns", "dir_times", "symlink_times")
#: ext4 without room for extra times (128-byte inodes): signed 32-bit seconds, no ns.
S32 = TimeRange(-(2**31), 2**31 - 1, NS)


def _time_diagnoses(report: conformance.Report) -> dict[str, str]:
    return {f"{f.path} {f.field}": f.diagnosis for name in TIME_CHECKS for f in report.result(name).failures}


def cp_a(src: str, dst: str) -> None:
    subprocess.run(["cp", "-a", "--", src, dst], check=True)


@pytest.mark.parametrize("copier", [faulty.clamps_to_i64_ns, faulty.clamps_to_32_bit_seconds])
def test_a_copier_that_clamps_is_diagnosed_clamped_on_tmpfs_which_holds_64_bit_seconds(
        copier: conformance.CopyFunction, tmpfs_strict: Path) -> None:
    report = conformance.check(copier, corpus="time-range", base=tmpfs_strict)
    found = _time_diagnoses(report)
    # Both ends, every kind that carries times: the 2262 clamp and the 2038 clamp alike.
    for path in ("far-past.txt", "far-future.txt", "far-dir", "far-link"):
        assert found[f"{path} mtime_ns"] == dx.CLAMPED and found[f"{path} atime_ns"] == dx.CLAMPED
    assert not any(report.result(name).passed for name in TIME_CHECKS)


def test_a_copier_that_wraps_i64_ns_is_diagnosed_wrapped_on_tmpfs(tmpfs_strict: Path) -> None:
    found = _time_diagnoses(conformance.check(faulty.wraps_to_i64_ns, corpus="time-range", base=tmpfs_strict))
    assert found["far-future.txt mtime_ns"] == found["far-past.txt atime_ns"] == dx.WRAPPED
    # -2**63 s is a whole number of 2**64 ns turns from the epoch: it wraps onto 0, which a clamp at 0 fits as well.
    assert found["far-past.txt mtime_ns"] in (dx.WRAPPED, dx.CLAMPED)


def test_cp_a_keeps_the_whole_range_of_tmpfs(tmpfs_strict: Path) -> None:
    report = conformance.check(cp_a, corpus="time-range", base=tmpfs_strict)
    assert [report.result(name).passed for name in ("content", *TIME_CHECKS)] == [True] * 5


def test_the_tree_asks_exactly_the_measured_ends_with_the_ns_the_filesystem_keeps(tmpfs_strict: Path) -> None:
    supplied = {meta.path: meta for meta in materialize("time-range", tmpfs_strict / "tree")}
    assert supplied["far-past.txt"].mtime_ns == STORE_LOWEST_S * NS        # the edge's own second: no ns there
    assert supplied["far-future.txt"].mtime_ns == STORE_HIGHEST_S * NS
    assert supplied["far-past.txt"].atime_ns == (STORE_LOWEST_S + 1) * NS + 1
    assert supplied["far-future.txt"].atime_ns == STORE_HIGHEST_S * NS - 1
    assert {m.path: (m.mtime_ns, m.atime_ns) for m in capture_tree(tmpfs_strict / "tree")} == {
        path: (m.mtime_ns, m.atime_ns) for path, m in supplied.items()}
    # A range handed in is used as it is: whole seconds only where the filesystem keeps no ns.
    coarse = {meta.path: meta for meta in load_tree("time-range", S32).entries}
    assert (coarse["far-past.txt"].atime_ns, coarse["far-future.txt"].atime_ns) == (
        (-(2**31) + 1) * NS, (2**31 - 2) * NS)


def test_on_a_32_bit_filesystem_nothing_past_its_range_is_asked_so_a_2038_clamp_is_no_failure(
        mounts: Mounts) -> None:
    require_loop_devices()
    base = mounts.ext4("strictatime", mkfs_args=("-I", "128"))
    assert probe_atime(base).time_range == S32
    for copier in (cp_a, faulty.clamps_to_32_bit_seconds, faulty.clamps_to_i64_ns):
        report = conformance.check(copier, corpus="time-range", base=base)
        assert [report.result(name).passed for name in ("content", *TIME_CHECKS)] == [True] * 5, copier


def test_on_xfs_bigtime_the_ends_are_1901_and_2486_so_a_2262_clamp_is_caught_and_cp_a_passes(
        mounts: Mounts) -> None:
    require_loop_devices()
    require_tool("mkfs.xfs", "xfsprogs")
    base = mounts.xfs()
    assert probe_atime(base).time_range == TimeRange(-(2**31), 16_299_260_424)  # XFS_BIGTIME_TIME_MAX
    found = _time_diagnoses(conformance.check(faulty.clamps_to_i64_ns, corpus="time-range", base=base))
    assert found["far-future.txt mtime_ns"] == dx.CLAMPED and "far-past.txt mtime_ns" not in found
    report = conformance.check(cp_a, corpus="time-range", base=base)
    assert [report.result(name).passed for name in ("content", *TIME_CHECKS)] == [True] * 5

"""Issue 25's new diagnoses (and issue 50's i64-ns ones), each produced by a faulty copier over real files on a
strictatime tmpfs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from artifactkit.conformance import checks as conformance
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata import drift as dx
from artifactkit.metadata.compare import compare
from tests.support import faulty_copiers as faulty

TIME_CHECKS = ("mtime_ns", "atime_ns", "dir_times", "symlink_times")


def _time_diagnoses(report: conformance.Report, field: str | None = None) -> dict[str, str]:
    return {f"{f.path} {f.field}": f.diagnosis for name in TIME_CHECKS for f in report.result(name).failures
            if field in (None, f.field)}


def test_a_uniform_100ns_floor_is_100ns_truncated_everywhere_even_on_whole_seconds(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.floors_to_100ns, corpus="edge-times", base=tmpfs_strict)
    found = _time_diagnoses(report)
    assert "one-ns.txt mtime_ns" in found  # ...000000001 floors to a whole second
    assert set(found.values()) == {dx.HUNDRED_NS_TRUNCATED}


def test_seconds_wrapped_in_32_bits_are_wrapped_both_ways(tmpfs_strict: Path) -> None:
    unsigned = _time_diagnoses(conformance.check(faulty.wraps_to_unsigned_32_bit_seconds, corpus="edge-times",
                                                 base=tmpfs_strict))
    assert unsigned == {"pre-1970.txt mtime_ns": dx.WRAPPED, "pre-1970.txt atime_ns": dx.WRAPPED}
    signed = _time_diagnoses(conformance.check(faulty.wraps_to_signed_32_bit_seconds, corpus="edge-times",
                                               base=tmpfs_strict))
    assert signed == {"post-2038.txt mtime_ns": dx.WRAPPED, "post-2038.txt atime_ns": dx.WRAPPED}


def test_atime_given_the_floored_mtime_is_set_to_mtime_also_for_directories_whose_mtime_moved(
        tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.sets_atime_to_floored_mtime, corpus="edge-times", base=tmpfs_strict)
    atimes = _time_diagnoses(report, "atime_ns")
    assert "setuid-tool atime_ns" in atimes and ". atime_ns" in atimes  # a shared second; a moved dir mtime
    assert set(atimes.values()) == {dx.SET_TO_MTIME}
    assert {f.diagnosis for f in report.result("dir_times").failures if f.field == "mtime_ns"} == {dx.OMITTED}


def test_an_atime_the_copier_recorded_after_its_own_read_is_named_so(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.records_atime_after_reading, corpus="basic", base=tmpfs_strict)
    assert {f.diagnosis for f in report.result("atime_ns").failures} == {dx.READ_BEFORE_RECORDED}
    assert {f.diagnosis for f in report.result("source_untouched").failures} == {dx.ADVANCED_BY_READ}


def test_holes_kept_coarser_are_sparse_coarsened_and_holes_lost_sparse_filled(tmpfs_strict: Path) -> None:
    coarse = conformance.check(faulty.coarsens_holes, corpus="sparse", base=tmpfs_strict).result("sparse")
    assert [(f.path, f.diagnosis) for f in coarse.failures] == [("disk.img", dx.SPARSE_COARSENED)]
    assert "131072 of 8388608 bytes data" in str(coarse.failures[0].actual)
    filled = conformance.check(faulty.exact, corpus="sparse", base=tmpfs_strict).result("sparse")
    assert {(f.path, f.diagnosis) for f in filled.failures} == {("disk.img", dx.SPARSE_FILLED),
                                                                ("tail.bin", dx.SPARSE_FILLED)}
    assert all(str(f.actual).startswith("dense: ") for f in filled.failures)


def _far_tree(root: Path) -> list[int]:
    """Files with times past 2262 and before 1677 (tmpfs keeps them): what a tool keeping i64 ns cannot hold."""
    root.mkdir()
    # A second or more past the count's ends: 1 ns past, a float's rounding would land there as well.
    times = [13_574_563_200_123_456_789, 2**63 + 3_000_000_007, -(2**63) - 3_000_000_007,
             -11_676_096_000_987_654_321]
    for at, ns in enumerate(times):
        (root / f"f{at}").write_bytes(b"x")
        os.utime(root / f"f{at}", ns=(times[at - 1], ns))
    return times


def test_times_past_2262_kept_as_i64_ns_are_clamped_or_wrapped(tmpfs_strict: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=tmpfs_strict))
    _far_tree(work / "src")
    source = capture_tree(work / "src")
    for copier, diagnosis in [(faulty.clamps_to_i64_ns, dx.CLAMPED), (faulty.wraps_to_i64_ns, dx.WRAPPED)]:
        copier(str(work / "src"), str(work / copier.__name__))
        found = {(m.path, m.field): m.diagnosis for m in compare(source, capture_tree(work / copier.__name__))
                 if m.field in ("mtime_ns", "atime_ns")}
        assert found == {(f"f{at}", field): diagnosis for at in range(4) for field in ("mtime_ns", "atime_ns")}

"""The publish's capture kept in the core (``engine/native_values.py``'s ``CapturedEntries``,
``native/src/py/captured_tree.rs``): what the core answers for every entry must be what the reference's plan makes
of the same tree — the reads, their bytes, their batches, the first time no manifest carries — and a range it does
not hold is refused. The entries and the manifest bytes themselves are held to the reference's by
``test_scan_differential.py``."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from artifactkit.engine.reference.scan import scan_tree
from artifactkit.store.publish import capture_source


def _tree(src: Path, sizes: list[int]) -> None:
    src.mkdir()
    (src / "d").mkdir()
    for i, size in enumerate(sizes):
        (src / ("d" if i % 2 else ".") / f"f{i:02d}").write_bytes(b"x" * size)
    os.link(src / "f00", src / "d" / "later")  # a hard link's later name: read once, by its first name
    os.symlink("f00", src / "link")


def test_the_reads_are_the_reference_plans_every_file_but_a_later_name_with_its_identity(
        native: ModuleType, fast_tmp: Path) -> None:
    sizes = [3, 0, 120, 7, 7, 300, 1]
    _tree(fast_tmp / "src", sizes)
    reference = scan_tree(fast_tmp / "src")
    captured = scan_tree(fast_tmp / "src", walker=native.NativeEngine(1, "publish").walk)
    reads, total = captured.entries.planned_reads(captured.identities)
    expected = [(i, e, reference.identities[e.path]) for i, e in enumerate(reference.entries)
                if e.kind == "file" and e.hardlink is None]
    assert list(reads) == expected and len(reads) == len(sizes)
    assert reads[-1] == expected[-1] and [reads[1], reads[2]] == expected[1:3]
    assert total == sum(sizes)
    assert captured.entries.file_count() == len(sizes) + 1
    # The reference's capture answers the same (the plain list the reference's scan holds).
    assert reference.entries.planned_reads(reference.identities) == (expected, sum(sizes))
    assert reference.entries.file_count() == len(sizes) + 1


def test_a_time_past_64_bit_ns_is_captured_by_the_core_as_by_the_reference(
        native: ModuleType, tmpfs_strict: Path) -> None:
    from artifactkit.engine.reference.engine import PythonEngine

    src = tmpfs_strict / "src"
    _tree(src, [1, 2])
    # tmpfs keeps 64-bit seconds: past 2**63 ns and before -2**63 ns, each inside the manifest's range.
    os.utime(src / "d" / "f01", ns=(-(2**63) * 10**9, (2**63 - 1) * 10**9))
    os.utime(src / "f00", ns=(2**63, -(2**63) - 1))
    trees = [capture_source(src, engine=engine)
             for engine in (PythonEngine(None, "publish"), native.NativeEngine(None, "publish"))]
    # Not the symlink: the first capture's readlink moved its atime on this strictatime mount.
    reference, core = ([(e.path, e.mtime_ns, e.atime_ns) for e in tree.entries if e.kind != "symlink"]
                       for tree in trees)
    assert core == reference
    assert ("d/f01", (2**63 - 1) * 10**9, -(2**63) * 10**9) in core and ("f00", -(2**63) - 1, 2**63) in core


def test_a_range_of_reads_the_capture_does_not_hold_is_refused(native: ModuleType, fast_tmp: Path) -> None:
    from artifactkit import _native

    _tree(fast_tmp / "src", [1, 2])
    tree = _native.capture_tree(str(fast_tmp / "src"), True, lambda _: None)
    with pytest.raises(IndexError, match=r"reads 1\.\.9"):
        _native.stage_files(str(fast_tmp / "src"), -1, -1, (tree, 1, 9), 1, _native.StageState())

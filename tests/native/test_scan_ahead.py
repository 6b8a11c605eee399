"""The capture's second thread takes whole directories ahead of the walk (``native/src/scan/second_thread.rs``): seen
from the outside, by ``strace -f``, which thread opens each directory. The entries themselves are held to the
reference's by ``test_scan_differential.py`` and every refusal by ``test_scan_guards.py``, both on two threads."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from artifactkit.errors import SourceChangedError
from tests.support.capability import require_tool

_CAPTURE = """
import sys
from artifactkit.engine.native import NativeEngine
NativeEngine(int(sys.argv[2]), "publish").walk(sys.argv[1], read_links=True, on_progress=lambda _: None)
"""


def _directory_openers(src: Path, threads: int, trace: Path) -> collections.Counter[str]:
    """How many of ``src``'s subdirectories each thread opened during a capture on ``threads`` threads."""
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace), sys.executable, "-c", _CAPTURE,
                    str(src), str(threads)], check=True)
    opened = re.compile(r'^(\d+) +openat\(AT_FDCWD, "' + re.escape(str(src)) + r'/d\d+", .*O_DIRECTORY')
    return collections.Counter(match[1] for line in trace.read_text().splitlines() if (match := opened.match(line)))


@pytest.mark.parametrize("threads", [1, 2])
def test_with_two_threads_every_other_directory_is_captured_ahead_by_the_second(
        native: ModuleType, fast_tmp: Path, threads: int) -> None:
    require_tool("strace", "strace")
    src = fast_tmp / "src"
    for d in range(40):
        (src / f"d{d:02d}").mkdir(parents=True)
        for f in range(3):
            (src / f"d{d:02d}" / f"f{f}").write_bytes(b"x")
    openers = _directory_openers(src, threads, fast_tmp / "trace")
    # The walk takes one directory while the helper captures the next: each thread opens half of them. Without
    # the second thread's look-ahead one thread opens all 40 (its name-splitting alone never opens one).
    assert sorted(openers.values()) == ([20, 20] if threads == 2 else [40])


@pytest.mark.parametrize("shape", ["siblings of a deep directory", "wide and narrow in turn", "one wide directory"])
def test_a_capture_with_directories_taken_ahead_and_parked_is_the_references(
        native: ModuleType, fast_tmp: Path, shape: str) -> None:
    from artifactkit.engine.reference.scan import scan_tree
    from tests.native.scan_trees import native_capture

    src = fast_tmp / "src"
    layout = {
        # "a" (slow: 300 names) is captured while the helper takes "b"; a's subdirectories come next, so "b"'s part
        # is parked until its turn, and "a/x" goes to the helper meanwhile.
        "siblings of a deep directory": {"a": 300, "a/x": 2, "a/x/deep": 1, "a/y": 40, "b": 1, "c": 5, "c/z": 0},
        "wide and narrow in turn": {f"d{i}": (200 if i % 2 else 1) for i in range(9)} | {"d3/sub": 7, "d4/sub": 0},
        "one wide directory": {"only": 500},
    }[shape]
    src.mkdir()
    for d, count in layout.items():
        (src / d).mkdir(parents=True, exist_ok=True)
        for f in range(count):
            (src / d / f"f{f:03d}").write_bytes(b"%d" % f)
    reference = scan_tree(src)
    for split_min in (2, 32):
        captured = scan_tree(src, walker=native_capture(threads=2, split_min=split_min))
        assert list(captured.entries) == list(reference.entries)
        assert captured.listed_noatime is reference.listed_noatime is True


@pytest.mark.parametrize("change", ["a name added", "a name removed", "the directory swapped"])
def test_a_directory_changed_after_its_capture_ahead_is_captured_again_at_its_turn(
        native: ModuleType, fast_tmp: Path, change: str) -> None:
    from artifactkit.engine.reference.scan import scan_tree
    from tests.native.scan_trees import native_capture

    def make(src: Path) -> None:
        # "a" is wide, so the second thread has long captured "b" ahead when a's capture ends and the hook runs.
        for d, count in (("a", 2000), ("b", 2)):
            (src / d).mkdir(parents=True)
            for f in range(count):
                (src / d / f"f{f:04d}").write_bytes(b"x")

    def hook(src: Path) -> Callable[[int], None]:
        def on_progress(captured: int) -> None:
            if captured != 2003:  # ".", "a", "b", then a's 2,000 names: b's turn is next
                return
            if change == "a name added":
                (src / "b" / "new").write_bytes(b"new")
            elif change == "a name removed":
                (src / "b" / "f0000").unlink()
            else:
                os.rename(src / "b", src / "b-gone")
                (src / "b").mkdir()
        return on_progress

    found: list[object] = []
    for walker in (None, native_capture(threads=2)):
        src = fast_tmp / ("src-ref" if walker is None else "src-native")
        make(src)
        try:
            tree = scan_tree(src, on_progress=hook(src), walker=walker)
            found.append([(e.path, e.kind, e.size) for e in tree.entries])
        except SourceChangedError as err:
            found.append(str(err).replace(str(src), "SRC"))
    reference, native_found = found
    assert native_found == reference
    assert isinstance(reference, str) == (change == "the directory swapped")

"""Competing readers really read (ordinary opens that move atime), count, and stop when told."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from artifactkit.isolation import reading
from artifactkit.isolation.readers import ReaderHandle, competing_readers, start_readers

OLD_NS = 1_000_000_000_123_456_789


def _tree(root: Path) -> Path:
    (root / "d" / "e").mkdir(parents=True)
    for rel in ("f1", "d/f2", "d/e/f3"):
        (root / rel).write_bytes(b"content " * 10)
    (root / "link").symlink_to("f1")
    return root


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("artifactkit-reader-")]


def test_readers_count_hundreds_of_reads_and_stop_joins_them(fast_tmp: Path) -> None:
    handle = start_readers(_tree(fast_tmp), n=3)
    assert len(_reader_threads()) == 3
    assert handle.wait_reads(300) >= 300
    final = handle.stop()
    assert final >= 300 and _reader_threads() == []
    assert handle.reads == final  # nothing reads after stop
    assert handle.stop() == final  # idempotent


def test_readers_are_hostile_they_move_atime_on_an_unprotected_strict_tree(tmpfs_strict: Path) -> None:
    root = _tree(tmpfs_strict / "hostile")
    for rel in ("f1", "d/e/f3", "link", "d"):
        os.utime(root / rel, ns=(OLD_NS, OLD_NS), follow_symlinks=False)
    with competing_readers(root, n=2) as handle:
        handle.wait_reads(50)
    moved = {rel: os.lstat(root / rel).st_atime_ns != OLD_NS for rel in ("f1", "d/e/f3", "link", "d")}
    assert moved == {"f1": True, "d/e/f3": True, "link": True, "d": True}


def test_readers_survive_files_vanishing_under_them(fast_tmp: Path) -> None:
    root = _tree(fast_tmp)
    with competing_readers(root, n=4) as handle:
        handle.wait_reads(100)
        for i in range(200):
            victim = root / f"tmp{i}"
            victim.write_bytes(b"x")
            victim.unlink()
        (root / "d" / "e" / "f3").unlink()
        start = handle.reads
        handle.wait_reads(start + 100)


def test_a_reader_failure_surfaces_on_stop(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str, **_: object) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(reading, "read_file", broken)
    handle = ReaderHandle(_tree(fast_tmp), n=1)
    with pytest.raises(RuntimeError, match="disk on fire"):
        handle.wait_reads(10)
    with pytest.raises(RuntimeError, match="competing reader failed"):
        handle.stop()
    assert _reader_threads() == []


def test_at_least_one_reader_is_required(fast_tmp: Path) -> None:
    with pytest.raises(ValueError, match="at least one reader"):
        start_readers(fast_tmp, n=0)

"""A publish of the core's own capture reads in one ``stage_files`` call (``native/src/read/progress.rs``): its
threads count each file, the calling thread tells the count every 256 files (or 64 MiB) with the exact counts of that
moment, and the rest at the end; a callback's exception and a Ctrl-C still stop it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.store.progress import Progress
from tests.support.engines import running_on

EVERY_FILES = 256  # tally::EVERY_FILES
FILES = 2500
SIZE = 8


def _tree(root: Path) -> Path:
    for index in range(FILES):
        (root / f"d{index % 25}").mkdir(parents=True, exist_ok=True)
        (root / f"d{index % 25}" / f"f{index}").write_bytes(f"{index:0{SIZE}}".encode())
    return root


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    from artifactkit import _native

    calls: list[int] = []
    real = getattr(_native, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(_native, name, counted)
    return calls


@pytest.mark.parametrize("threads", [1, 2])
def test_one_call_reads_the_whole_publish_and_tells_the_exact_count_every_256_files(
        native: ModuleType, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    src = _tree(fast_tmp / "src")
    calls = _count_calls(monkeypatch, "stage_files")
    seen: list[Progress] = []
    with running_on("native"):
        Store(fast_tmp / "store").publish(src, "demo", workers=threads, progress=seen.append)
    assert len(calls) == 1
    told = [(report.entries, report.bytes) for report in seen if report.phase == "read"]
    # However the threads and the calling thread were scheduled: one step a wake, its counts those of that moment.
    steps = [(k * EVERY_FILES, k * EVERY_FILES * SIZE) for k in range(1, FILES // EVERY_FILES + 1)]
    assert told == [(0, 0), *steps, (FILES, FILES * SIZE)]


def test_a_progress_callback_that_raises_stops_the_read_and_leaves_no_version(
        native: ModuleType, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")

    def refuse(report: Progress) -> None:
        if report.phase == "read" and report.entries:
            raise RuntimeError("the caller gave up")
    store = Store(fast_tmp / "store")
    with running_on("native"), pytest.raises(RuntimeError, match="the caller gave up"):
        store.publish(src, "demo", workers=2, progress=refuse)
    assert store.list() == []
    assert list((fast_tmp / "store" / "staging").iterdir()) == []

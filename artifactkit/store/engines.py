"""The executors (:mod:`~artifactkit.store.executor`): the pure-Python reference, and which one an operation gets.

``ARTIFACTKIT_ENGINE=python`` selects the reference; the default is the native core where it is built and
its executor is registered in :data:`ENGINES`, else the reference.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from typing import Final

from artifactkit.store.download import create_items
from artifactkit.store.executor import CreateItem, CreateJob, Executor, StageJob
from artifactkit.store.stage import Staged, StageItem, stage_file

#: The environment variable that picks the engine (``python``: the reference; ``native``: the core, an
#: error where it is not built).
ENGINE_SETTING: Final = "ARTIFACTKIT_ENGINE"
#: engine name -> ``module:class`` of its executor, imported on first use (a missing module: not built).
ENGINES: Final = {"native": "artifactkit.store._native_engine:NativeExecutor"}
#: Files per batch of the reference: its progress moves once a batch (a call per file would cost more than
#: the file's own work on small files), and a bucket's transaction uploads a batch while the next is read.
BATCH_FILES: Final = 200


class PythonExecutor:
    """The reference: every batch in this process, one file after another. Simple by design — speed lives in
    the native core — so ``workers`` is accepted and has no effect."""

    name = "python"

    def __init__(self, workers: int | None, task: str) -> None:
        """``workers`` and ``task`` as every executor takes them (:func:`executor_for`); neither changes
        anything here."""

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[list[Staged]]:
        txn = job.txn
        seen: set[str] = set()  # across batches: content read twice in one publish is staged once
        for start in range(0, len(items), BATCH_FILES):
            part = items[start:start + BATCH_FILES]
            yield [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                   for item in part]
            job.on_batch(len(part), sum(entry.size for _, entry, _ in part))

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        for batch in _create_batches(items):
            create_items(job.root_fd, batch, job.blobs)
            job.on_batch(*_covered(batch))

    def close(self) -> None:
        """Nothing outlives a call."""

    def __enter__(self) -> PythonExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _create_batches(items: Sequence[CreateItem]) -> list[list[CreateItem]]:
    """Consecutive directories together, about :data:`BATCH_FILES` files a batch (a big directory split)."""
    work: list[list[CreateItem]] = [[]]
    filled = 0
    for path, entries in items:
        for start in range(0, max(len(entries), 1), BATCH_FILES):
            if filled >= BATCH_FILES:
                work.append([])
                filled = 0
            part = entries[start:start + BATCH_FILES]
            work[-1].append((path, part))
            filled += len(part)
    return work


def _covered(batch: Sequence[CreateItem]) -> tuple[int, int]:
    """Entries and bytes of a download batch, for its progress."""
    files = sum(e.size for _, entries in batch for e in entries if e.kind == "file")
    return sum(len(entries) for _, entries in batch), files


def engine_name() -> str:
    """The engine an operation gets now: ``ARTIFACTKIT_ENGINE``, else ``native`` where it is built."""
    asked = os.environ.get(ENGINE_SETTING, "")
    if asked:
        if asked != "python" and asked not in ENGINES:
            raise ValueError(f"{ENGINE_SETTING}={asked!r}: the engines are python, {', '.join(ENGINES)}")
        return asked
    return "native" if native_available() else "python"


def native_available() -> bool:
    """Whether the native core is built and its executor importable."""
    module = ENGINES["native"].partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def executor_for(workers: int | None, task: str) -> Executor:
    """A fresh executor for one ``task`` ("publish" or "download") with ``workers`` as the caller asked:
    ``None`` (the engine's default) or a positive number, checked here for every engine alike."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    name = engine_name()
    if name == "python":
        return PythonExecutor(workers, task)
    module, _, attr = ENGINES[name].partition(":")
    executor: Executor = getattr(importlib.import_module(module), attr)(workers, task)
    return executor


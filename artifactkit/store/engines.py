"""The executors (:mod:`~artifactkit.store.executor`): the pure-Python reference in this process, and its
batches spread over worker processes; which one an operation gets.

``ARTIFACTKIT_ENGINE=python`` selects the reference; the default is the native core where it is built and
its executor is registered in :data:`ENGINES`, else the reference (spread over processes for big trees, as
:func:`~artifactkit.store.workers.choose_workers` decides).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from typing import Final

from artifactkit.store.download import create_items
from artifactkit.store.download import to_wire as entry_to_wire
from artifactkit.store.executor import CreateItem, CreateJob, Executor, StageJob
from artifactkit.store.stage import Staged, StageItem, StageShared, stage_file, to_wire
from artifactkit.store.workers import BATCH_FILES, LazyPool, batches

#: The environment variable that picks the engine (``python``: the reference; ``native``: the core, an
#: error where it is not built).
ENGINE_SETTING: Final = "ARTIFACTKIT_ENGINE"
#: engine name -> ``module:class`` of its executor, imported on first use (a missing module: not built).
ENGINES: Final = {"native": "artifactkit.store._native_engine:NativeExecutor"}


class PythonExecutor:
    """The reference: every batch in this process, one file after another. With ``workers`` above one
    (asked, or chosen for a big tree) the batches go to worker processes instead, each the same code."""

    name = "python"

    def __init__(self, workers: int | None, task: str) -> None:
        self._pool = LazyPool(workers, task)

    def expect(self, files: int) -> None:
        self._pool.expect(files)

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[list[Staged]]:
        txn = job.txn
        seen: set[str] = set()
        workers = self._pool.get(len(items)) if txn.blobs_path is not None and not txn.in_memory else None
        if workers is None:
            for start in range(0, len(items), BATCH_FILES):
                part = items[start:start + BATCH_FILES]
                yield [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                       for item in part]
                job.on_batch(len(part), sum(entry.size for _, entry, _ in part))
            return
        assert txn.blobs_path is not None
        st, blobs = os.fstat(txn.stage_fd), os.fstat(txn.blobs_fd)  # the checked fd's inode, never the path's
        shared: StageShared = (job.root, txn.stage_path, (st.st_dev, st.st_ino), txn.blobs_path,
                               (blobs.st_dev, blobs.st_ino), len(items))

        def here(batch: Sequence[StageItem]) -> list[Staged]:
            return [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen) for item in batch]
        work = batches(items)
        done = workers.run(shared, work, here, wire=lambda batch: [to_wire(item) for item in batch],
                           on_done=lambda n: job.on_batch(len(work[n]), sum(entry.size for _, entry, _ in work[n])))
        # The parent's own batches are Staged already; a worker's came back as plain tuples (stage_batch).
        yield [found if isinstance(found, Staged) else Staged._make(found) for batch in done for found in batch]

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        work: list[list[CreateItem]] = [[]]
        filled = 0
        for path, entries in items:  # consecutive directories together, about BATCH_FILES files a batch
            for start in range(0, max(len(entries), 1), BATCH_FILES):
                if filled >= BATCH_FILES:
                    work.append([])
                    filled = 0
                part = entries[start:start + BATCH_FILES]
                work[-1].append((path, part))
                filled += len(part)
        workers = self._pool.get(sum(len(entries) for _, entries in items)) if job.blobs.for_workers else None
        if workers is None:
            for batch in work:
                create_items(job.root_fd, batch, job.blobs)
                job.on_batch(*_covered(batch))
            return
        shared = (job.root_path, job.root_identity, job.blobs.directory)
        workers.run(shared, work, lambda batch: create_items(job.root_fd, batch, job.blobs),
                    wire=_items_to_wire, on_done=lambda n: job.on_batch(*_covered(work[n])))

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PythonExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _covered(batch: Sequence[CreateItem]) -> tuple[int, int]:
    """Entries and bytes of a download batch, for its progress."""
    files = sum(e.size for _, entries in batch for e in entries if e.kind == "file")
    return sum(len(entries) for _, entries in batch), files


def _items_to_wire(batch: Sequence[CreateItem]) -> list[object]:
    return [(path, [entry_to_wire(entry) for entry in entries]) for path, entries in batch]


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
    """A fresh executor for one ``task`` ("publish" or "download") with ``workers`` as the caller asked."""
    name = engine_name()
    if name == "python":
        return PythonExecutor(workers, task)
    module, _, attr = ENGINES[name].partition(":")
    executor: Executor = getattr(importlib.import_module(module), attr)(workers, task)
    return executor


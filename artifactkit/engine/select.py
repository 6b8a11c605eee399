"""The executors (:mod:`~artifactkit.engine.protocol`): the pure-Python reference, and which one an operation gets.

``ARTIFACTKIT_ENGINE=python`` selects the reference; the default is the native core where it is built and
its executor is registered in :data:`ENGINES`, else the reference. :func:`engine_info` says which one an
operation would get now, and why (``artifactkit --version``, the diagnose evidence).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from typing import Final

import attrs

from artifactkit.engine.plan import Plan
from artifactkit.engine.protocol import CreateItem, CreateJob, Executor, StageJob, covered
from artifactkit.engine.reference.scan import ScannedTree, Walker
from artifactkit.engine.reference.stage import Staged, StageItem, stage_file
from artifactkit.store.download import create_items

#: The environment variable that picks the engine (``python``: the reference; ``native``: the core, an
#: error where it is not built).
ENGINE_SETTING: Final = "ARTIFACTKIT_ENGINE"
#: engine name -> ``module:class`` of its executor, imported on first use (a missing module: not built).
ENGINES: Final = {"native": "artifactkit.engine.native:NativeExecutor"}
#: The extension module the native executor runs on: absent where no Rust toolchain built it.
CORE_MODULE: Final = "artifactkit._native"
#: Files per batch of the reference: its progress moves once a batch (a call per file would cost more than
#: the file's own work on small files), and a bucket's transaction uploads a batch while the next is read.
BATCH_FILES: Final = 200


class PythonExecutor:
    """The reference: every batch in this process, one file after another. Simple by design — speed lives in
    the native core — so ``workers`` is accepted and has no effect."""

    name = "python"
    walker: Walker | None = None  # scan.py's own walk

    def __init__(self, workers: int | None, task: str) -> None:
        """``workers`` and ``task`` as every executor takes them (:func:`executor_for`); neither changes
        anything here."""

    def manifest_body(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> bytes | None:
        return None  # assemble's own encoder is the reference

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[list[Staged]]:
        txn = job.txn
        seen: set[str] = set()  # across batches: content read twice in one publish is staged once
        for start in range(0, len(items), BATCH_FILES):
            part = items[start:start + BATCH_FILES]
            yield [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                   for item in part]
            job.on_batch(len(part), sum(entry.size for _, entry, _ in part))

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        for src, dst in moves:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        for batch in _create_batches(items):
            create_items(job.root_fd, batch, job.blobs)
            job.on_batch(*covered(batch))

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
    return _native_problem() == ""


def _native_problem() -> str:
    """Why the native executor cannot be imported here ("" if it can)."""
    module = ENGINES["native"].partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as err:
        if importlib.util.find_spec(CORE_MODULE) is None:
            return "the native core is not built"
        return f"the native core is built but not used: {err}"
    return ""


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


@attrs.frozen
class EngineInfo:
    """Which engine a publish or download would run on now, and why (never an exception: a setting that
    names no usable engine is described, so ``--version`` can say what is wrong)."""

    #: ``"python"`` or ``"native"`` (or, with :attr:`usable` false, what ``ARTIFACTKIT_ENGINE`` says).
    name: str
    #: Picked by ``ARTIFACTKIT_ENGINE`` (else by default: the core where it is built).
    selected: bool
    #: The native core's threads when ``workers`` is not given (``None``: the reference, one process).
    threads: int | None
    #: Whether an operation can run on it (false: every publish and download fails as :attr:`problem` says).
    usable: bool
    #: Why the native core is not in use, or why the selected engine cannot run ("" when there is nothing to say).
    problem: str

    def describe(self) -> str:
        """One line for people: ``native, 2 threads`` or ``python; the native core is not built``."""
        if not self.usable:
            return f"none; {self.problem}"
        parts = [self.name]
        if self.threads is not None:
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.selected:
            parts.append(f"selected by {ENGINE_SETTING}")
        return ", ".join(parts) + (f"; {self.problem}" if self.problem else "")


def engine_info() -> EngineInfo:
    """What :func:`executor_for` would give an operation now, with ``workers`` not given."""
    selected = bool(os.environ.get(ENGINE_SETTING, ""))
    try:
        name = engine_name()
    except ValueError as err:
        return EngineInfo(os.environ[ENGINE_SETTING], selected=True, threads=None, usable=False, problem=str(err))
    problem = "" if selected and name == "python" else _native_problem()
    if name == "native" and problem:  # asked for by the setting, and it cannot load
        return EngineInfo(name, selected=True, threads=None, usable=False,
                          problem=f"{ENGINE_SETTING}=native, but {problem}")
    executor = executor_for(None, "publish")
    try:
        threads = getattr(executor, "threads", None)
    finally:
        executor.close()
    return EngineInfo(name, selected=selected, threads=threads, usable=True, problem=problem)

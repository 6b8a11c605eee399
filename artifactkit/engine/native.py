"""The native core as an :class:`~artifactkit.engine.protocol.Executor`: ``ENGINES["native"]`` in
:mod:`~artifactkit.engine.select` names :class:`NativeExecutor`, so this module importing (the core built)
is what makes it the default engine.

An operation's files go to the core on ``workers`` threads (all usable cores when not asked): a publish of the
core's own capture and a download's runs of the parsed manifest in one call each, which tells its progress as
it goes; other items in batches (:data:`BATCH_FILES` files or :data:`BATCH_BYTES` bytes, whichever comes
first), so progress moves as batches finish. A publish's calls share one
:class:`~artifactkit._native.StageState`: "is this content new?" is decided across the whole publish, as the
reference's one ``seen`` set does, and against the plan's own listing of ``blobs/`` where it took one. What the
core does not do is done here by the reference's own functions, in this process: a transaction that keeps small
files in memory (a bucket's), a backend without a blobs directory, blobs reached through another seam's
``opener`` (tests' faulty steps).

This module must not import :mod:`~artifactkit.engine.select` (which names it): that would be a cycle.
Importing it fails with ``ImportError`` where the core is not built (through :mod:`._native_batches`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Final, TypeVar

from artifactkit import _native
from artifactkit.engine import _native_manifest, _native_scan, _native_staged
from artifactkit.engine import native_errors as _native_batches
from artifactkit.engine._native_capture import CapturedEntries, CapturedReads
from artifactkit.engine._native_tree import CoreRun
from artifactkit.engine.plan import Plan
from artifactkit.engine.protocol import CreateItem, CreateJob, StageJob, covered, usable_cores
from artifactkit.engine.reference.scan import ScannedTree, Walker
from artifactkit.engine.reference.stage import Staged, StageItem, stage_file
from artifactkit.store.blob_check import BlobLookup
from artifactkit.store.download import create_items

#: A batch of the items the core did not make ends at this many files or bytes, so progress moves during a long
#: operation. A call's fixed cost is its threads' start: measured here (2 threads, a loaded machine) 0.3 ms of
#: CPU per call, about 1 % of a batch of 1,024 small files.
BATCH_FILES: Final = 1024
BATCH_BYTES: Final = 256 << 20
_Item = TypeVar("_Item")


class NativeExecutor:
    """The execute stage in the native core's threads, the GIL released for each call."""

    name = "native"

    def __init__(self, workers: int | None, task: str) -> None:
        # At most the usable cores: the per-file work is CPU and metadata syscalls, so a thread beyond them
        # only takes time from the others (``--workers 10000`` would otherwise start 10,000 threads a call).
        self.threads = min(workers, usable_cores()) if workers is not None else usable_cores()
        #: The core's walk on this executor's threads (a stat cache's questions are the reference's: scan.py
        #: then walks itself).
        self.walker: Walker = functools.partial(_native_scan.capture, threads=self.threads)

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[Sequence[Staged]]:
        txn = job.txn
        in_core = not txn.in_memory and txn.blobs_fd >= 0
        seen: set[str] = set()
        # The plan's listing of blobs/ (the same fd's), so the core stats only the names it holds, as has_blob.
        state = _native.StageState(job.has_blob.names if isinstance(job.has_blob, BlobLookup) else None)
        if in_core and isinstance(items, CapturedReads):
            # The core's own capture, its items made there: one call, its progress told as it goes (ten calls of
            # 1,024 files were 6 % of a publish of many on two threads: each a thread start and a wait for the
            # batch's slowest file).
            yield _native_batches.stage_captured(job.root, txn.stage_fd, txn.blobs_fd, items, (0, len(items)),
                                                 threads=self.threads, state=state, on_progress=job.on_batch)
            job.has_blob.repaired.update(state.repaired())  # the core checked the blobs it read the content of
            return
        for batch in _batches(items, lambda item: (1, item[1].size)):
            if in_core:
                # The transaction's checked fd of blobs/, never its path (a writer of the store may have swapped it).
                found = _native_batches.stage_files(job.root, txn.stage_fd, txn.blobs_fd, batch, self.threads,
                                                    state=state)
            else:
                found = [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                         for item in batch]
            job.on_batch(len(batch), sum(entry.size for _, entry, _ in batch))
            yield found
        job.has_blob.repaired.update(state.repaired())

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        blobs = job.blobs
        if blobs.opener is not None or (blobs.dir_fd is None and not blobs.directory):
            create_items(job.root_fd, items, blobs)
            job.on_batch(*covered(items))
            return
        # The core's own entries in one call, its progress reported as it goes (a call per batch was a thread
        # start and a wait for the slowest thread each: 6 % of a download of many on a busy machine).
        runs = [item for item in items if isinstance(item[1], CoreRun)]
        if runs:
            _native_batches.create_files(job.root_fd, blobs, runs, self.threads, on_progress=job.on_batch)
        parts = [(path, entries[start:start + BATCH_FILES])
                 for path, entries in items if not isinstance(entries, CoreRun)
                 for start in range(0, max(len(entries), 1), BATCH_FILES)]
        for batch in _batches(parts, lambda part: covered([part])):
            _native_batches.create_files(job.root_fd, blobs, batch, self.threads)
            job.on_batch(*covered(batch))

    def manifest_body(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> bytes | None:
        # None where an entry holds a value only the reference encodes: assemble then encodes it all.
        kept = _native_staged.kept_state(found)
        all_noatime = tree.listed_noatime and (kept.all_noatime() if kept is not None else
                                               all(read.noatime for read in found))
        if isinstance(planned.entries, CapturedEntries) and not planned.lines and not planned.known:
            return _native_manifest.manifest_captured(name, all_noatime, planned.entries,
                                                      found if kept is None else kept)
        return _native_manifest.manifest_bytes(name, all_noatime, list(planned.lines), planned.entries, planned.known,
                                               found=found)

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        # Through the module's attribute: the crash harness (artifactkit/testing/crash.py) counts it as a rename.
        _native_batches.rename_files(moves, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def close(self) -> None:
        """Nothing outlives a call."""

    def __enter__(self) -> NativeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batches(items: Sequence[_Item], weigh: Callable[[_Item], tuple[int, int]]) -> Iterator[list[_Item]]:
    """Consecutive ``items`` in batches of at most :data:`BATCH_FILES` files and :data:`BATCH_BYTES` bytes as
    ``weigh`` counts them (``(files, bytes)`` of an item), one item at least."""
    batch: list[_Item] = []
    files = byte_count = 0
    for item in items:
        count, size = weigh(item)
        if batch and (files + count > BATCH_FILES or byte_count + size > BATCH_BYTES):
            yield batch
            batch, files, byte_count = [], 0, 0
        batch.append(item)
        files += count
        byte_count += size
    if batch:
        yield batch

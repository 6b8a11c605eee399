"""The native core as an :class:`~artifactkit.store.executor.Executor`: ``ENGINES["native"]`` in
:mod:`~artifactkit.store.engines` names :class:`NativeExecutor`, so this module importing (the core built)
is what makes it the default engine.

A whole operation's files go to the core in one call on ``workers`` threads (all usable cores when not
asked): "is this content new?" is then decided across the whole publish, exactly as the reference's one
``seen`` set does. What the core does not do is done here by the reference's own functions, in this
process: a transaction that keeps small files in memory (a bucket's), a backend without a blobs directory,
blobs reached through another seam's ``opener`` (tests' faulty steps).

This module must not import :mod:`~artifactkit.store.engines` (which names it): that would be a cycle.
Importing it fails with ``ImportError`` where the core is not built (through :mod:`._native_batches`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from artifactkit.store import _native_batches
from artifactkit.store.download import create_items
from artifactkit.store.executor import CreateItem, CreateJob, StageJob
from artifactkit.store.stage import Staged, StageItem, stage_file


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or ``taskset`` narrows)."""
    return max(1, len(os.sched_getaffinity(0)))


class NativeExecutor:
    """The execute stage in the native core's threads, the GIL released for each call."""

    name = "native"

    def __init__(self, workers: int | None, task: str) -> None:
        self.threads = workers if workers is not None and workers > 0 else usable_cores()
        self.task = task

    def expect(self, files: int) -> None:
        """Threads start per call: nothing to warm up."""

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[list[Staged]]:
        txn = job.txn
        if txn.in_memory or txn.blobs_fd < 0:
            seen: set[str] = set()
            found = [stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                     for item in items]
        else:
            # The transaction's checked fd of blobs/, never its path (a writer of the store may have swapped it).
            found = _native_batches.stage_files(job.root, txn.stage_fd, txn.blobs_fd, items, self.threads)
        # One call for the whole publish (so "new content?" spans it), so progress moves once, at its end.
        job.on_batch(len(items), sum(entry.size for _, entry, _ in items))
        yield found

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        blobs = job.blobs
        if blobs.opener is not None or (blobs.dir_fd is None and not blobs.directory):
            create_items(job.root_fd, items, blobs)
        else:
            _native_batches.create_files(job.root_fd, blobs, items, self.threads)
        job.on_batch(sum(len(entries) for _, entries in items),
                     sum(e.size for _, entries in items for e in entries if e.kind == "file"))

    def close(self) -> None:
        """Nothing outlives a call."""

    def __enter__(self) -> NativeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

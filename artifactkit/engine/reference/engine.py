"""The reference :class:`~artifactkit.engine.protocol.Engine`: every batch in this process, one file after another.

Simple by design — speed lives in the native core, which is held to this — so ``workers`` is accepted and has
no effect. Each step is one function of this package: :func:`~artifactkit.engine.reference.scan.scan_tree`,
:func:`~artifactkit.engine.reference.stage.stage_file`, the manifest's own encoder (assemble's),
:func:`~artifactkit.manifest.encode.parse_manifest`, :func:`~artifactkit.engine.reference.create.create_items`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from artifactkit._os_calls import named
from artifactkit.engine.plan import Plan
from artifactkit.engine.protocol import CreateJob, StageJob
from artifactkit.engine.reference.create import create_items, create_tree
from artifactkit.engine.reference.lists import EntryList, ReadList
from artifactkit.engine.reference.scan import scan_tree
from artifactkit.engine.reference.stage import stage_file
from artifactkit.engine.values import CacheHits, CreateItem, Layout, ScannedTree, Staged, StageItem, covered
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.encode import SortedLines
from artifactkit.manifest.parse import parse_manifest

#: Files per batch: progress moves once a batch (a call per file would cost more than the file's own work on
#: small files), and a bucket's transaction uploads a batch while the next is read.
BATCH_FILES: Final = 200


class PythonEngine:
    """The reference engine."""

    name = "python"
    threads: int | None = None

    def __init__(self, workers: int | None, task: str) -> None:
        """``workers`` and ``task`` as every engine takes them (:func:`~artifactkit.engine.select.engine_for`);
        neither changes anything here."""

    def capture(self, src: str | os.PathLike[str], *, read_links: bool, on_progress: Callable[[int], None] | None,
                cached: CacheHits | None) -> ScannedTree:
        return scan_tree(src, read_links=read_links, on_progress=on_progress, cached=cached)

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[ReadList]:
        txn = job.txn
        seen: set[str] = set()  # across batches: content read twice in one publish is staged once
        for start in range(0, len(items), BATCH_FILES):
            part = items[start:start + BATCH_FILES]
            yield ReadList(stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                           for item in part)
            job.on_batch(len(part), sum(entry.size for _, entry, _ in part))

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        for src, dst in moves:
            named("rename", os.rename, src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def encode(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> SortedLines | None:
        return None  # assemble's own encoder is the reference

    def parse(self, ref: ArtifactRef, body: bytes, *, where: str) -> EntryList:
        return parse_verified(ref, body, where=where)

    def create(self, job: CreateJob, layout: Layout) -> None:
        create_tree(job, layout, _create_in_batches)

    def close(self) -> None:
        """Nothing outlives a call."""

    def __enter__(self) -> PythonEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_verified(ref: ArtifactRef, body: bytes, *, where: str) -> EntryList:
    """The reference's parse of ``ref``'s manifest, read at ``where``: its digest checked first, then every refusal
    of :func:`~artifactkit.manifest.encode.parse_manifest`."""
    check_manifest_digest(ref, body, where)
    manifest = parse_manifest(body, where=f"manifest of {ref}")
    return EntryList(manifest.entries, manifest.name, manifest.source_read_noatime)


def _create_in_batches(job: CreateJob, items: Sequence[CreateItem]) -> None:
    for batch in _create_batches(items):
        create_items(job.root_fd, batch, job.blobs)
        job.on_batch(*covered(batch))


def _create_batches(items: Sequence[CreateItem]) -> list[list[CreateItem]]:
    """Consecutive directories together, about :data:`BATCH_FILES` files a batch (a big directory split)."""
    work: list[list[CreateItem]] = [[]]
    filled = 0
    for path, entries in items:
        for start in range(0, max(len(entries), 1), BATCH_FILES):
            if filled >= BATCH_FILES:
                work.append([])
                filled = 0
            part = entries.part(start, start + BATCH_FILES)
            work[-1].append((path, part))
            filled += len(part)
    return work

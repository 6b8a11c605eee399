"""The door between the store and an engine: what a publish and a download ask of the per-file work.

Publish and download run three stages: *scan* (every ``lstat`` before a read) → *plan* (what must be read:
:mod:`~artifactkit.engine.plan`) → *execute*. The store writes the stages once; an :class:`Engine` does the
per-file work of each — :meth:`~Engine.capture` a tree, :meth:`~Engine.stage` its reads, move the staged blobs,
:meth:`~Engine.encode` the manifest, :meth:`~Engine.parse` one, :meth:`~Engine.create` a laid-out tree — and
every guarantee stays where it is: in the checks the engines make and in the commit around them.

What an engine hands over it owns: a captured tree (:class:`~artifactkit.engine.values.Captured`), a batch of
reads (:class:`~artifactkit.engine.values.ReadBatch`), a parsed manifest
(:class:`~artifactkit.engine.values.Parsed`) and its runs of entries
(:class:`~artifactkit.engine.values.EntryRun`). The store asks those values what it needs and never which
engine made them; the reference (:mod:`~artifactkit.engine.reference`) implements them with plain lists, the
native engine (:mod:`~artifactkit.engine.native`) with the core's handles. A new operation is a method here,
written in the reference first (the specification), then in the native engine held to it by a differential
test in ``tests/native/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from artifactkit.engine.blob_check import HasBlob
    from artifactkit.engine.blobs import BlobSource
    from artifactkit.engine.plan import Plan
    from artifactkit.engine.ports import StagingTxn
    from artifactkit.engine.values import CacheHits, Layout, Parsed, ReadBatch, ScannedTree, Staged, StageItem
    from artifactkit.manifest.artifact_ref import ArtifactRef
    from artifactkit.manifest.encode import SortedLines


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or ``taskset`` narrows)."""
    return max(1, len(os.sched_getaffinity(0)))


def _ignore(entries: int, byte_count: int) -> None:
    """A job's ``on_batch`` where nobody watches its progress."""


@attrs.frozen
class StageJob:
    """What every batch of one publish shares: the source root, the transaction it stages into, and whether a
    blob is stored already (its bytes are then not staged)."""

    root: str
    txn: StagingTxn
    has_blob: HasBlob
    #: Called as batches finish with ``(entries, bytes)`` they covered: the progress a person sees.
    on_batch: Callable[[int, int], None] = attrs.field(default=_ignore, kw_only=True)


@attrs.frozen
class CreateJob:
    """What every batch of one download shares: the tree's root in the private directory (an fd: everything
    below it is reached through directory fds) and the blobs."""

    root_fd: int
    blobs: BlobSource
    #: As :attr:`StageJob.on_batch`.
    on_batch: Callable[[int, int], None] = attrs.field(default=_ignore, kw_only=True)


class Engine(Protocol):
    """The per-file work of one operation. Batches may run in any order and at once; results come back in the
    order of their items. On any failure every batch still running is stopped before the exception propagates,
    so the caller can remove its staging with nothing still writing there. Every refusal is the reference's:
    the same class, message and fields."""

    #: How it names itself in ``--version``, the evidence and the benchmarks ("python", "native").
    name: str
    #: Its threads (``None``: the reference, one file after another in this process).
    threads: int | None

    def capture(self, src: str | os.PathLike[str], *, read_links: bool, on_progress: Callable[[int], None] | None,
                cached: CacheHits | None) -> ScannedTree:
        """Every ``lstat`` of the tree at ``src`` before any read (``cached``: a stat cache's questions, asked of
        each listing and entry; ``on_progress``: the entries so far, after each directory)."""

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[ReadBatch]:
        """Read, hash and stage ``items``; yields results batch by batch, in order, so the transaction can send a
        batch's blobs on while the next is read. Each content is staged once across the whole call."""

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        """``os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)`` for every pair, replacing what ``dst``
        names (a chunk of a :class:`~artifactkit.engine.values.ReadBatch`'s moves); may run on a thread of its own."""

    def encode(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> SortedLines | None:
        """The manifest :func:`~artifactkit.store.publish.assemble` makes of a plan that records nothing, the same
        lines in the same order; or ``None``: assemble encodes it itself (the reference's encoder)."""

    def parse(self, ref: ArtifactRef, body: bytes, *, where: str) -> Parsed:
        """The manifest of ``ref`` from its bytes (read at ``where``): they must hash to its digest and parse."""

    def create(self, job: CreateJob, layout: Layout) -> None:
        """Make the laid-out tree beneath ``job.root_fd``: directories, then every entry of ``layout.items``
        with its content verified as written and its metadata restored (owners → xattrs → mode → flags →
        times), hard links' later names, then directory times deepest first; everything read back exactly."""

    def close(self) -> None:
        """Stop whatever it started (idempotent)."""

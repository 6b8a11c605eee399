"""The *execute* stage's seam: the per-file work of a publish (read, hash, stage) and of a download (create,
verify, restore), handed over in batches.

Publish and download run three stages: *scan* (every ``lstat`` before a read) → *plan* (what must be read:
:mod:`~artifactkit.engine.plan`) → *execute*. The first two and everything after are written once, in the
parent; an :class:`Executor` does only the middle, for whole batches of entries, so an implementation may
run them however it likes — one file after another in this process (:mod:`~artifactkit.engine.select`'
reference) or on the native core's threads (:mod:`~artifactkit.engine.native`) — and every guarantee
stays where it is: in the checks the batch functions make and in the commit around them.

This module holds only the protocol, the jobs' value types and how many cores an execution may use: the
restore and the publish import it, and it imports neither, so no implementation can form an import cycle with them.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from artifactkit.engine.plan import Plan
    from artifactkit.engine.reference.scan import ScannedTree, Walker
    from artifactkit.engine.reference.stage import Staged, StageItem
    from artifactkit.metadata.model import FileMeta
    from artifactkit.store.backend import PublishTxn
    from artifactkit.store.blobs import BlobSource
    from artifactkit.store.layout import HasBlob

#: A batch item of a download: a directory (relative to the tree's root) and the files, links and special
#: files to create in it (its subdirectories exist already; hard links' later names come after).
CreateItem = tuple[str, "Sequence[FileMeta]"]



def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or ``taskset`` narrows)."""
    return max(1, len(os.sched_getaffinity(0)))

class EntryRun(Sequence["FileMeta"]):
    """Entries of one directory held elsewhere (the native core's parse of the manifest): their ``FileMeta`` objects
    are made only when asked for, their file bytes are known without them."""

    @property
    @abc.abstractmethod
    def file_bytes(self) -> int:
        """The sizes of the regular files among them, summed."""


def covered(batch: Sequence[CreateItem]) -> tuple[int, int]:
    """Entries and file bytes of a download batch, for its progress (either engine's)."""
    return (sum(len(entries) for _, entries in batch),
            sum(entries.file_bytes if isinstance(entries, EntryRun) else
                sum(e.size for e in entries if e.kind == "file") for _, entries in batch))


def _ignore(entries: int, byte_count: int) -> None:
    """A job's ``on_batch`` where nobody watches its progress."""


@attrs.frozen
class StageJob:
    """What every batch of one publish shares: the source root, the transaction it stages into, and whether a
    blob is stored already (its bytes are then not staged)."""

    root: str
    txn: PublishTxn
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


class Executor(Protocol):
    """Runs the per-file work of one operation. Batches may run in any order and at once; results come
    back in the order of ``items``. On any failure every batch still running is stopped before the
    exception propagates, so the caller can remove its staging with nothing still writing there."""

    #: How it names itself in ``--version``, the evidence and the benchmarks ("python", "native").
    name: str
    #: Its own walk of a source tree where no stat cache asks questions (:data:`~artifactkit.engine.reference.scan.Walker`),
    #: or ``None``: :func:`~artifactkit.engine.reference.scan.scan_tree`'s.
    walker: Walker | None

    def manifest_body(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> bytes | None:
        """The manifest :func:`~artifactkit.store.publish.assemble` makes of a plan that records nothing, the
        same bytes; or ``None``: assemble encodes it itself (the reference's encoder)."""

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[Sequence[Staged]]:
        """Read, hash and stage ``items``; yields results batch by batch, in order, so the transaction can
        send a batch's blobs on while the next is read (a batch may be :class:`~artifactkit.engine.reference.stage.HeldReads`:
        kept by the executor, made ``Staged`` only when asked)."""

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        """``os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)`` for every pair, replacing what ``dst``
        names (a publish's flushed blobs into ``blobs/``); may be called from a thread of its own."""

    def create(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        """Create every entry of ``items`` with its content verified as written and its metadata restored
        (owners → xattrs → mode → flags → times), then read each back and compare exactly."""

    def close(self) -> None:
        """Stop whatever it started (idempotent)."""

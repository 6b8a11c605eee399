"""The native engine: the core (:mod:`artifactkit._native`, threads, the GIL released for each call) behind the
door (:mod:`~artifactkit.engine.protocol`). ``ENGINES["native"]`` in :mod:`~artifactkit.engine.select` names
:class:`NativeEngine`, so this module importing (the core built) is what makes it the default.

One core function per job: ``capture_tree`` (scan), ``stage_files`` (read, hash, stage), ``rename_staged`` (the
staged blobs into ``blobs/``), ``manifest_lines`` (encode), ``parse_tree`` (parse), ``create_files`` (create,
verify, restore). What crosses back stays in the core, held by the door's types
(:mod:`~artifactkit.engine.native_values`). A failure comes back as data (``NativeFailure(kind, position,
fields)``) and is raised by :mod:`~artifactkit.engine.native_errors`. What the core does not do is the
reference's, in this process: a transaction that keeps small files in memory (a bucket's), blobs reached through
another seam's ``opener``, FIFOs and devices (made by name, never opened).
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from artifactkit import _native
from artifactkit.engine import native_errors as errors
from artifactkit.engine.blob_check import BlobLookup
from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.content import IN_MEMORY_LIMIT
from artifactkit.engine.native_values import (
    CapturedEntries,
    CapturedIdentities,
    CapturedReads,
    CoreRun,
    CoreTree,
    KeptReads,
    StagedMoves,
    kept_state,
)
from artifactkit.engine.plan import Plan
from artifactkit.engine.protocol import CreateJob, StageJob, usable_cores
from artifactkit.engine.reference.create import create_items, create_tree, open_dir, verify_children
from artifactkit.engine.reference.engine import parse_verified
from artifactkit.engine.reference.lists import ReadList
from artifactkit.engine.reference.restore_meta import create_special
from artifactkit.engine.reference.scan import scan_tree
from artifactkit.engine.reference.stage import stage_file
from artifactkit.engine.values import CacheHits, CreateItem, Layout, Parsed, ScannedTree, Staged, StageItem, covered
from artifactkit.errors import ManifestLimitError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import SortedLines
from artifactkit.manifest.limits import MAX_EXTENTS, SIZE_LIMIT, file_size_limit
from artifactkit.metadata.flags import COMPARED_FLAGS, RESTORABLE_FLAGS
from artifactkit.metadata.model import SPECIAL_KINDS, FileMeta

# The core hard-codes what the reference imports: a core whose constants drifted is not this engine.
if (int(RESTORABLE_FLAGS), int(COMPARED_FLAGS), IN_MEMORY_LIMIT) != (
        _native.RESTORABLE_FLAGS, _native.COMPARED_FLAGS, _native.IN_MEMORY_LIMIT):
    raise ImportError("artifactkit._native was built with other flag masks or limits than this package")

#: A batch of the items the core did not make ends at this many files or bytes, so progress moves during a long
#: operation. A call's fixed cost is its threads' start: measured here (2 threads, a loaded machine) 0.3 ms of
#: CPU per call, about 1 % of a batch of 1,024 small files.
BATCH_FILES: Final = 1024
BATCH_BYTES: Final = 256 << 20
_Item = TypeVar("_Item")


class NativeEngine:
    """The per-file work on the core's ``threads`` (at most the usable cores: the work is CPU and metadata
    syscalls, so a thread beyond them only takes time from the others)."""

    name = "native"

    def __init__(self, workers: int | None, task: str) -> None:
        self.threads: int | None = min(workers, usable_cores()) if workers is not None else usable_cores()

    def capture(self, src: str | os.PathLike[str], *, read_links: bool, on_progress: Callable[[int], None] | None,
                cached: CacheHits | None) -> ScannedTree:
        # A stat cache's questions are the reference's: scan_tree then walks itself.
        return scan_tree(src, read_links=read_links, on_progress=on_progress, cached=cached, walker=self.walk)

    def walk(self, root: str, *, read_links: bool, on_progress: Callable[[int], None],
             split_min: int | None = None) -> ScannedTree:
        """The reference's walk without a cache, by the core, the capture kept there; a second thread captures
        the next directory ahead or splits a directory of ``split_min`` names or more (``None``: the core's)."""
        try:
            usable = b"\x00" not in os.fsencode(root)
        except UnicodeEncodeError:
            usable = False
        if not usable:
            os.lstat(root)  # the reference's first call refuses it: ValueError or UnicodeEncodeError, as there
        try:
            split = {} if split_min is None else {"split_min": split_min}
            tree = _native.capture_tree(root, read_links, on_progress, self.threads or 1, **split)
        except _native.NativeFailure as failure:
            errors.raise_scan(failure.args[0], failure.args[2], root)
        return ScannedTree(root=root, entries=CapturedEntries(tree), identities=CapturedIdentities(tree),
                           listed_noatime=tree.listed_noatime)

    def stage(self, job: StageJob, items: Sequence[StageItem]) -> Iterator[ReadList | KeptReads]:
        txn = job.txn
        weigh: Callable[[StageItem], tuple[int, int]] = lambda item: (1, item[1].size)  # noqa: E731
        if txn.in_memory or txn.blobs_fd < 0:  # a bucket's: small files' bytes kept here, the reference's reads
            seen: set[str] = set()
            for batch in _batches(items, weigh):
                yield ReadList(stage_file(job.root, item, txn.stage_fd, job.has_blob, seen, in_memory=txn.in_memory)
                               for item in batch)
                job.on_batch(len(batch), sum(entry.size for _, entry, _ in batch))
            return
        # One state for the publish: "is this content new?" across all its calls, against the plan's listing of
        # blobs/ (the transaction's checked fd's) where it took one.
        state = _native.StageState(job.has_blob.names if isinstance(job.has_blob, BlobLookup) else None)
        if isinstance(items, CapturedReads):
            # The core's own capture in one call, its progress told as it goes (ten calls of 1,024 files were 6 %
            # of a publish of many on two threads: each a thread start and a wait for the batch's slowest file).
            yield stage_files(job.root, txn.stage_fd, txn.blobs_fd, items, threads=self.threads or 1, state=state,
                              on_progress=job.on_batch)
        else:
            for batch in _batches(items, weigh):
                yield stage_files(job.root, txn.stage_fd, txn.blobs_fd, batch, threads=self.threads or 1, state=state)
                job.on_batch(len(batch), sum(entry.size for _, entry, _ in batch))
        job.has_blob.repaired.update(state.repaired())  # the core checked the blobs it read the content of

    def move_files(self, src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        # Through the module's attribute: the crash harness (tests/support/crash.py) counts it as a rename.
        rename_files(moves, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    def encode(self, name: str, tree: ScannedTree, planned: Plan, found: Sequence[Staged]) -> SortedLines | None:
        # None where an entry holds a value only the reference encodes: assemble then encodes it all.
        kept = kept_state(found)
        all_noatime = tree.listed_noatime and (kept.all_noatime() if kept is not None else
                                               all(read.noatime for read in found))
        entries = planned.entries
        try:
            if isinstance(entries, CapturedEntries) and not planned.lines and not planned.known:
                reads = kept if kept is not None else list(found)
                lines = _native.manifest_lines(entries.tree, reads, MAX_EXTENTS)
            else:
                # A part's reads are numbered after the parts before it (Plan.base); the core counts from its entries.
                reads = [read._replace(position=read.position - planned.base) for read in found] if planned.base \
                    else list(found)
                lines = _native.manifest_lines(list(entries), reads, MAX_EXTENTS, list(planned.lines), planned.known)
        except _native.NativeFailure as failure:
            kind, at, fields = failure.args
            errors.raise_encode(kind, fields, entries, at)
        return None if lines is None else SortedLines(name, all_noatime, lines)

    def parse(self, ref: ArtifactRef, body: bytes, *, where: str) -> Parsed:
        try:
            # Past SIZE_LIMIT no size parses anyway, so a larger setting is that (the core's integer is 64 bits).
            limit = min(file_size_limit(), SIZE_LIMIT)
            return CoreTree(_native.parse_tree(body, ref.digest, limit))  # the digest checked on a thread of its own
        except (ManifestLimitError, _native.NativeFailure):
            # Declined: another digest, a setting that is no limit, or bytes the reference refuses or reads as
            # a shape the core leaves to it (a lone surrogate, an integer past 64 bits): its errors, once.
            return parse_verified(ref, body, where=where)

    def create(self, job: CreateJob, layout: Layout) -> None:
        create_tree(job, layout, self._create_items)

    def _create_items(self, job: CreateJob, items: Sequence[CreateItem]) -> None:
        blobs = job.blobs
        if blobs.opener is not None or (blobs.dir_fd is None and not blobs.directory):
            create_items(job.root_fd, items, blobs)  # blobs through another seam: the reference's reads
            job.on_batch(*covered(items))
            return
        # The core's own entries in one call, its progress told as it goes (a call per batch was a thread start
        # and a wait for the slowest thread each: 6 % of a download of many on a busy machine).
        runs = [item for item in items if isinstance(item[1], CoreRun)]
        if runs:
            create_files(job.root_fd, blobs, runs, self.threads or 1, on_progress=job.on_batch)
        parts = [(path, entries.part(start, start + BATCH_FILES)) for path, entries in items
                 if not isinstance(entries, CoreRun) for start in range(0, max(len(entries), 1), BATCH_FILES)]
        for batch in _batches(parts, lambda part: covered([part])):
            create_files(job.root_fd, blobs, batch, self.threads or 1)
            job.on_batch(*covered(batch))

    def close(self) -> None:
        """Nothing outlives a call."""

    def __enter__(self) -> NativeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stage_files(root: str, txn_fd: int, blobs_fd: int, items: Sequence[StageItem], *, threads: int,
                state: _native.StageState, span: tuple[int, int] | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> KeptReads:
    """:func:`~artifactkit.engine.reference.stage.stage_file` of every item (of :class:`CapturedReads`, those in
    ``span``, made by the core from its capture) on ``threads`` threads into the staging dir ``txn_fd``, the
    results kept in ``state``, the publish's: content staged by an earlier call with it is staged once, and
    ``has_blob`` is a regular file of that size in ``blobs_fd`` (asked only of the state's listing where it has
    one). ``on_progress(files, bytes)`` with what was read since its last call, every few hundred files."""
    first = len(state)
    start, stop = (0, len(items)) if span is None else span
    try:
        reads = (items.tree, start, stop) if isinstance(items, CapturedReads) else [_item_to_wire(i) for i in items]
        kept = _native.stage_files(root, txn_fd, blobs_fd, reads, threads, state, on_progress)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        errors.raise_stage(kind, fields, root, items[start + at])
    return KeptReads(state, first, first + kept)


def rename_files(moves: Sequence[tuple[str, str]], *, src_dir_fd: int, dst_dir_fd: int) -> None:
    """``os.rename`` of every pair in order: :class:`StagedMoves` by the core, GIL released (their names made
    there), any other pairs here; the first failing pair's ``OSError`` as ``os.rename`` raises it."""
    if not isinstance(moves, StagedMoves):
        for src, dst in moves:
            os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        return
    try:
        _native.rename_staged(src_dir_fd, dst_dir_fd, moves.state, moves.start, moves.stop)
    except _native.NativeFailure as failure:
        errors.raise_common(failure.args[0], failure.args[2])


def _item_to_wire(item: StageItem) -> tuple[int, str, int, int, int | None, int, int]:
    """What the core's read needs of an item (path, size, mtime_ns, ctime_ns, identity), as a plain tuple."""
    index, entry, (dev, ino) = item
    return index, entry.path, entry.size, entry.mtime_ns, entry.ctime_ns, dev, ino


def _entry_to_wire(entry: FileMeta) -> tuple[Any, ...]:
    """What creating ``entry`` (a file or symlink) needs, in the order ``create_files`` reads it (ctime, hard link,
    link count and device number are not: a created file or symlink sets none of them)."""
    return (entry.path, entry.kind, entry.mode, entry.mtime_ns, entry.atime_ns, entry.size, entry.sha256,
            entry.target, entry.uid, entry.gid, entry.xattrs, entry.extents, entry.flags)


def create_files(root_fd: int, blobs: BlobSource, batch: Sequence[CreateItem], threads: int, *,
                  on_progress: Callable[[int, int], None] | None = None) -> None:
    """:func:`~artifactkit.engine.reference.create.create_items` of a batch: files and symlinks by the core (a
    :class:`CoreRun` from its own entries, any other as tuples), FIFOs and devices here."""
    if blobs.opener is not None:
        raise ValueError("the native core reads blobs from a directory, not through an opener")
    native: list[tuple[str, list[tuple[Any, ...]] | tuple[int, int, int]]] = []
    made: list[Sequence[FileMeta]] = []  # what each native item holds, for a failure's entry
    special: list[tuple[str, list[FileMeta]]] = []
    tree: _native.ParsedTree | None = None
    for path, entries in batch:
        if isinstance(entries, CoreRun):
            if tree is not None and entries.tree is not tree:
                raise ValueError("a batch holds runs of one parsed tree")
            tree = entries.tree
            native.append((path, entries.ref))
            made.append(entries)
            continue
        regular = [e for e in entries if e.kind not in SPECIAL_KINDS]
        if regular:
            native.append((path, [_entry_to_wire(e) for e in regular]))
            made.append(regular)
        if len(regular) < len(entries):
            special.append((path, [e for e in entries if e.kind in SPECIAL_KINDS]))
    blobs_fd = blobs.dir_fd
    if blobs_fd is None:
        blobs_fd = os.open(blobs.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _native.create_files(root_fd, blobs_fd, native, threads, tree, on_progress)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        starts = list(itertools.accumulate((len(entries) for entries in made), initial=0))

        def flat(k: int) -> FileMeta:  # the entry at the core's position across the items, made when named
            item = bisect.bisect_right(starts, k) - 1
            return made[item][k - starts[item]]

        errors.raise_create(kind, fields, flat, at, blobs)
    finally:
        if blobs.dir_fd is None:
            os.close(blobs_fd)
    for path, specials in special:
        with open_dir(root_fd, path) as fd:
            for entry in specials:
                create_special(fd, entry.path.rpartition("/")[2], entry)
            verify_children(specials, fd)


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

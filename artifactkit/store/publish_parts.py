"""Publish in parts: the default publish (no stat cache, links as they are) of a tree of any size, one part in memory.

The capture comes a part at a time (:func:`~artifactkit.engine.reference.scan_parts.scan_parts`: at most
:data:`PART_ENTRIES` entries, in the manifest's order). Each part is planned, read and staged by the engine and its
lines made, then let go but for its staged blobs' moves (:meth:`~artifactkit.store.backend.PublishTxn.spill`); its
lines go on into :func:`~artifactkit.manifest.tree_write.write_tree`'s one pass, which stages each directory's object
as the walk leaves its subtree. The rest is :func:`~artifactkit.store.publish.publish_tree`'s: one transaction, its
one barrier once every part is read and every object made, the claim. The same tree makes the same objects in parts
as whole (``tests/store/test_publish_parts.py``: parts of 1, 3 and 17 entries, both engines).

What it holds: one part (its captures, reads and lines), the walk's open directories and their lines in
``write_tree``, one capture and read per inode with more than one name, and the answers of ``has_blob``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import attrs

from artifactkit.engine.blob_check import HasBlob
from artifactkit.engine.plan import Content, Plan
from artifactkit.engine.protocol import Engine, StageJob
from artifactkit.engine.reference.scan_parts import Identity, PartWalk, scan_parts, with_first_reads
from artifactkit.engine.values import Reads, ScannedTree
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import check_representable
from artifactkit.manifest.limits import manifest_size_limit
from artifactkit.manifest.paths import check_artifact_name
from artifactkit.manifest.tree_write import write_tree
from artifactkit.store.backend import Opened, PublishTxn
from artifactkit.store.progress import Reporter
from artifactkit.store.publish import (
    StagedObjects,
    assemble,
    capture_source,
    claim_version,
    repaired_warning,
    stage_object,
)
from artifactkit.store.source_atimes import MovedAtimes, moved_atimes

#: Entries a part holds (the last fewer). A part costs about 1 KB an entry in this process (its captures, reads and
#: lines): 20,000 keep it near 20 MiB, while each part still gives the native core's threads thousands of files.
PART_ENTRIES: Final = 20_000
#: Entries a tree may have and still publish whole. Whole, the native core captures, plans and encodes it without a
#: Python object an entry, as fast as ``cp -a``; in parts the walk is Python's, about 1.5x slower at 200,000 files.
#: Whole, 100,000 files peaked at 157.9 MB and 200,000 at 238.7 MiB; in parts 200,000 and 1,000,000 at 87.4 and 94.5
#: MiB (docs/performance.md, diagnostics/results/bench-publish-memory-*.json). A limit of 100,000 sent the scale
#: run's 100,000 files (and the interrupt tests') through parts: a root suite 20-40 s longer.
WHOLE_UP_TO: Final = 150_000


@attrs.define
class PartedCapture:
    """A source captured a part at a time, the first part taken already (a source whose scan fails at once creates
    no store); and the reads of its hard links' first names, which their later names in later parts take."""

    walk: PartWalk
    first: ScannedTree
    rest: Iterator[ScannedTree]
    content: dict[Identity, Content] = attrs.field(factory=dict)

    def __iter__(self) -> Iterator[ScannedTree]:
        yield self.first
        yield from self.rest


def capture_parts(src: str | os.PathLike[str], on_progress: Callable[[int], None] | None = None, *,
                  part_entries: int | None = None) -> PartedCapture:
    """The source at ``src`` to publish in parts of ``part_entries`` (``None``: :data:`PART_ENTRIES`), its first part
    captured; each part refused as :func:`~artifactkit.store.publish.capture_source` refuses a tree.
    ``on_progress(entries so far)`` while the first part is captured (then the reads report)."""
    manifest_size_limit()  # a setting that is no limit is refused before anything is read
    reporting = [on_progress]
    walk = scan_parts(src, part_entries=part_entries or PART_ENTRIES,
                      on_progress=lambda count: reporting[0] and reporting[0](count))
    parts = iter(walk)
    first = _checked(next(parts))  # the root's entry, at least, is in the first part
    reporting[0] = None  # later parts are captured while the reads report, on a thread of their own
    return PartedCapture(walk, first, (_checked(part) for part in parts))


class _OverAPartError(Exception):
    """A whole capture stopped: the tree has more entries than :data:`WHOLE_UP_TO`."""


def capture_source_or_parts(src: str | os.PathLike[str], on_progress: Callable[[int], None] | None = None, *,
                            engine: Engine) -> ScannedTree | PartedCapture:
    """The default publish's capture: whole (``engine``'s, as :func:`~artifactkit.store.publish.capture_source`
    takes it) if the tree has at most :data:`WHOLE_UP_TO` entries, else in parts (one part in memory however large
    the tree). The whole capture stops after the directory that takes it past that (its links unread: ``readlink``
    comes last); the walk in parts starts again."""
    def counting(count: int) -> None:
        if count > WHOLE_UP_TO:
            raise _OverAPartError
        if on_progress is not None:
            on_progress(count)
    try:
        return capture_source(src, on_progress=counting, engine=engine)
    except _OverAPartError:
        return capture_parts(src, on_progress)


def _checked(part: ScannedTree) -> ScannedTree:
    first = part.entries.first_unrepresentable()
    check_representable(() if first is None else (part.entries[first],), where=f"publish of {part.root!r}")
    return part


def publish_in_parts(opened: Opened, capture: PartedCapture, name: str, *, engine: Engine,
                     progress: Reporter | None = None) -> ArtifactRef:
    """Publish the source ``capture`` walks as the next version of ``name`` in the opened store, a part at a time;
    visible only once complete, as :func:`~artifactkit.store.publish.publish_tree` publishes a whole capture."""
    progress = progress or Reporter(None)
    check_artifact_name(name)
    with contextlib.ExitStack() as stack:
        guard, txn = stack.enter_context(opened.publishing())
        # One answer for every part: a listing of blobs/ where the store is small beside a part, else a look each.
        has_blob = txn.blob_lookup(PART_ENTRIES)
        progress.phase("read")
        listing = PartLines(name, capture, engine, txn, has_blob, progress)
        objects = StagedObjects()
        body, digest = write_tree(listing, functools.partial(stage_object, txn, has_blob, objects))
        txn.add(objects)
        txn.seal(engine.move_files)
        txn.flush(body)
        ref = claim_version(txn, guard, name, body, digest)
    if has_blob.repaired:
        warnings.warn(repaired_warning(has_blob.repaired), stacklevel=3)
    if listing.moved.total:
        warnings.warn(listing.moved.warning(), stacklevel=3)
    return ref


@attrs.define
class PartLines:
    """The manifest's lines, each part's made once it is read (:class:`~artifactkit.manifest.tree_write.Listing`);
    ``source_read_noatime`` is known once they are all read."""

    name: str
    capture: PartedCapture
    engine: Engine
    txn: PublishTxn
    has_blob: HasBlob
    progress: Reporter
    noatime: bool = True
    moved: MovedAtimes = attrs.field(factory=MovedAtimes)

    @property
    def source_read_noatime(self) -> bool:
        return self.noatime

    def lines(self) -> Iterator[str]:
        base = 0
        with ThreadPoolExecutor(1, thread_name_prefix="artifactkit-capture") as ahead:
            for part in _captured_ahead(iter(self.capture), ahead):
                yield from self.read(part, base)
                base += len(part.entries)
        self.moved += MovedAtimes(directories=self.capture.walk.moved_dirs)

    def read(self, part: ScannedTree, base: int) -> Iterator[str]:
        """Read and stage ``part`` (its reads numbered from ``base``) and make its lines; only the lines are kept."""
        part = with_first_reads(part, self.capture.content)
        reads, read_bytes = part.entries.planned_reads(part.identities)
        planned = Plan(self.has_blob, part.entries, [(base + at, entry, identity) for at, entry, identity in reads],
                       {}, [], read_bytes=read_bytes, base=base)
        found = Reads()
        for batch in self.engine.stage(StageJob(part.root, self.txn, self.has_blob, on_batch=self.progress.advance),
                                       planned.reads):
            self.txn.add(batch)  # a bucket sends these while the next batch is read
            found.add(batch)
        for at, (_, entry, identity) in enumerate(planned.reads):
            if entry.nlink is not None and entry.nlink > 1:  # a first name: its later names may be in later parts
                read = found[at]
                self.capture.content[identity] = (read.sha256, read.flags, read.extents)
        listing, _ = assemble(part, self.name, planned, found, encode=self.engine.encode)
        self.noatime = self.noatime and listing.source_read_noatime
        # Its directories' atimes were looked at as they were listed (PartWalk.moved_dirs), maybe in a later part.
        self.moved += moved_atimes(attrs.evolve(part, listed_noatime=True), found.batches, base)
        self.txn.spill()
        return listing.lines()


def _captured_ahead(parts: Iterator[ScannedTree], pool: ThreadPoolExecutor) -> Iterator[ScannedTree]:
    """``parts``, the next captured on ``pool`` while the caller reads this one: the native core reads with the GIL
    released, so the walk's Python runs beside it (200,000 files on tmpfs, three paired runs: 9.8, 10.6 and 11.5 s
    against 12.3, 12.0 and 11.2 s one part after the other). A capture of the next part meanwhile moves nothing of
    this one's: they share no entry, and a later name of a hard link takes its first name's capture."""
    part = next(parts, None)
    while part is not None:
        following = pool.submit(next, parts, None)
        yield part
        part = following.result()

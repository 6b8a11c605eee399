"""Publish, written once for every backend: *scan* → *plan* → *execute* → seal → assemble → flush → claim.

The scan captures every ``lstat`` before any read (:func:`capture_source`); the plan says which files must
be read (:mod:`~artifactkit.engine.plan`: everything, or what the stat cache cannot vouch for); an engine
reads, hashes and stages them in batches (:mod:`~artifactkit.engine.protocol`). The backend's transaction
then seals them — the one durability barrier: a local store's staged blobs under one ``syncfs``, then
renamed into ``blobs/`` on a thread while the manifest is assembled here from what the scan captured and
the reads found — and flushes: the moves finished, the manifest written and fsynced (a bucket: every upload
answered). Only then is a version claimed, by :func:`claim_version`, the one loop every backend's atomic
claim runs under. A visible name therefore always refers to stored bytes (git's ``fsyncMethod=batch``).

This is a publish of a whole capture: with a stat cache, with ``links="contained"``, and of a tree of up to
150,000 entries. A larger one goes in parts (:mod:`~artifactkit.store.publish_parts`), with the same stages.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Final

import attrs

from artifactkit.engine.blob_check import HasBlob
from artifactkit.engine.content import write_staged
from artifactkit.engine.plan import Plan, plan_reads
from artifactkit.engine.protocol import Engine, StageJob
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import CacheHits, ReadBatch, Reads, ScannedTree, Staged, staging_name
from artifactkit.errors import RepairedBlobsWarning
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import SortedLines, check_representable, encode_entry, file_line, sorted_lines
from artifactkit.manifest.limits import manifest_size_limit
from artifactkit.manifest.paths import LinkPolicy, check_artifact_name, check_link_policy, check_links_contained
from artifactkit.manifest.tree_write import write_tree
from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.backend import Guard, Opened, PublishTxn
from artifactkit.store.progress import Reporter
from artifactkit.store.source_atimes import warn_moved_atimes
from artifactkit.store.stat_cache import StatCache
from artifactkit.store.versions import proven_manifest


def with_content(entry: FileMeta, sha: str, flags: int | None, extents: Extents | None) -> FileMeta:
    """``entry`` with what its read found (direct construction: ``attrs.evolve`` costs 6 us a file; positional,
    in ``model.FIELD_ORDER``: keywords cost as much again)."""
    return FileMeta(entry.path, entry.kind, entry.mode, entry.mtime_ns, entry.atime_ns, entry.size, sha, entry.target,
                    entry.ctime_ns, entry.uid, entry.gid, entry.xattrs, entry.hardlink, entry.nlink, extents, flags)


def capture_source(src: str | os.PathLike[str], on_progress: Callable[[int], None] | None = None, *,
                   cached: CacheHits | None = None, links: LinkPolicy = "as-is",
                   engine: Engine | None = None) -> ScannedTree:
    """Every ``lstat`` of the source before any read, refused early if a manifest could not hold it.
    ``on_progress(entries so far)`` is called as the scan goes; ``cached`` is the stat cache
    (:class:`~artifactkit.store.stat_cache.StatCache`); ``links="contained"`` refuses a tree with links that
    may leave it (:func:`~artifactkit.manifest.paths.check_links_contained`); ``engine``: whose capture (``None``: the
    one selected now)."""
    # Its tree objects are held to the manifest limit once every file is read: a setting that is no limit is
    # refused now, before anything is.
    manifest_size_limit()
    if check_link_policy(links) == "contained":
        # Every link must be in ``entries`` to be checked: the cache's listing and entry hits would leave
        # some out. Its content hits (by inode, in publish_tree) still spare the reads of unchanged files.
        cached = None
    with contextlib.ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(contextlib.closing(engine_for(None, "publish")))
        tree = engine.capture(src, read_links=True, on_progress=on_progress, cached=cached)
    where = f"publish of {os.fspath(src)!r}"
    if links == "contained":
        check_links_contained(tree.entries, where=where)
    first = tree.entries.first_unrepresentable()  # the core finds it without making every entry
    check_representable(() if first is None else (tree.entries[first],), where=where)
    return tree


def fill_hardlinks(entries: list[FileMeta], read: dict[str, FileMeta]) -> list[FileMeta]:
    """One inode, one read: the other names of a hard link share its content, flags and holes (a later name whose
    first name was read in an earlier part of a publish in parts came with them)."""
    return [entry if entry.hardlink is None or entry.kind != "file" or entry.sha256 is not None else
            attrs.evolve(entry, sha256=read[entry.hardlink].sha256, flags=read[entry.hardlink].flags,
                         extents=read[entry.hardlink].extents)
            for entry in entries]


def publish_tree(opened: Opened, tree: ScannedTree, name: str, *, engine: Engine | None = None,
                 cache: StatCache | None = None, progress: Reporter | None = None) -> ArtifactRef:
    """Publish a captured tree as the next version of ``name`` in the opened store; visible only once complete.

    ``engine``: who reads the files (``None``: the one selected now); ``cache``: the stat cache, loaded before the
    scan, which plans fewer reads and records this publish's for the next (the caller saves it);
    ``progress``: told of the reads as batches finish.
    """
    progress = progress or Reporter(None)
    check_artifact_name(name)
    with contextlib.ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(contextlib.closing(engine_for(None, "publish")))
        guard, txn = stack.enter_context(opened.publishing())
        found = Reads()
        planned = plan_reads(tree, name, txn, cache, read_manifest=lambda ref: proven_manifest(opened, ref))
        if planned.reuse is not None:
            txn.seal(engine.move_files)  # nothing staged, so no barrier either: the seal only ends staging
            body, digest = planned.reuse
        else:
            progress.phase("read", entries_total=len(planned.reads), bytes_total=planned.read_bytes)
            job = StageJob(tree.root, txn, planned.has_blob, on_batch=progress.advance)
            for batch in engine.stage(job, planned.reads):
                txn.add(batch)  # a bucket sends these while the next batch is read
                found.add(batch)
            # Read: their items (100 bytes a file) go before the manifest, the publish's peak of memory, is made.
            if isinstance(planned.reads, list):
                planned.reads.clear()
            listing, recorded = assemble(tree, name, planned, found, encode=engine.encode)
            if cache is not None:
                for entry, line in recorded:
                    cache.record(entry, tree.identities[entry.path], line)
            # The tree's new objects are staged as blobs are, as they are made, so the one barrier covers them too.
            objects = StagedObjects()
            body, digest = write_tree(listing, functools.partial(stage_object, txn, planned.has_blob, objects))
            del listing
            txn.add(objects)
            txn.seal(engine.move_files)
        txn.flush(body)  # a bucket's checks of what it deduplicated end here, their repairs too
        ref = claim_version(txn, guard, name, body, digest)
    if planned.has_blob.repaired:
        warnings.warn(repaired_warning(planned.has_blob.repaired), stacklevel=3)
    warn_moved_atimes(tree, found.batches)
    return ref


class StagedObjects(list[Staged], ReadBatch):
    """A publish's new tree objects as one batch of staged blobs (:class:`~artifactkit.engine.values.ReadBatch`)."""

    __slots__ = ()

    def staged_count(self) -> int:
        return len(self)

    def move_chunks(self, per_call: int) -> Iterator[list[tuple[str, str]]]:
        for start in range(0, len(self), per_call):
            yield [(item.path(), item.sha256) for item in self[start:start + per_call]]


def stage_object(txn: PublishTxn, has_blob: HasBlob, staged: StagedObjects, digest: str, data: bytes) -> None:
    """A tree object into ``staged`` unless the store holds it (an unchanged directory's object is there: checked by
    content, as every blob a publish deduplicates against): a directory's written into staging (the barrier makes
    it durable), a bucket's kept in memory for its upload. Its position is negative: no file's read has one."""
    if has_blob(digest, len(data), data):
        return
    position = -1 - len(staged)
    if not txn.in_memory:
        write_staged(txn.stage_fd, staging_name(position), data)
    staged.append(Staged(position, digest, True, None, None, True, data if txn.in_memory else None))


#: Digests a :class:`~artifactkit.errors.RepairedBlobsWarning`'s message names (its ``blobs`` lists them all).
SHOWN_REPAIRS: Final = 5


def repaired_warning(repaired: set[str]) -> RepairedBlobsWarning:
    """What a publish says of the damaged blobs it stored its own bytes over (:mod:`~artifactkit.engine.blob_check`)."""
    blobs = sorted(repaired)
    shown = ", ".join(blobs[:SHOWN_REPAIRS]) + (f" and {len(blobs) - SHOWN_REPAIRS} more" if len(blobs) > SHOWN_REPAIRS
                                                 else "")
    return RepairedBlobsWarning(
        f"repaired {len(blobs)} damaged blob{'s' if len(blobs) != 1 else ''} in the store: {shown} held other bytes "
        "than their names say (planted by a writer of the store, or rotted on its disk); this publish stored its own "
        "over them, so every version naming them downloads again", blobs)


def assemble(tree: ScannedTree, name: str, planned: Plan, found: Sequence[Staged], *,
             encode: Encoder | None = None) -> tuple[SortedLines, list[Recorded]]:
    """The manifest's lines from what the scan captured, the plan knew and the reads found; and, when the plan
    asks for them (a stat cache records every entry), each entry with its line. ``encode``: the engine's
    :meth:`~artifactkit.engine.protocol.Engine.encode`, asked first where the plan records nothing."""
    if not planned.record and encode is not None:
        encoded = encode(name, tree, planned, found)
        if encoded is not None:
            return encoded, []
    all_noatime = tree.listed_noatime
    content = dict(planned.known)  # index -> (sha, flags, extents)
    for read in found:
        all_noatime = all_noatime and read.noatime
        content[read.position] = (read.sha256, read.flags, read.extents)
    lines = list(planned.lines)
    entries: list[FileMeta] = []
    read_entries: dict[str, FileMeta] = {}  # path -> entry with content facts, for the other names of a hard link
    for index, captured in enumerate(planned.entries, planned.base):
        facts = content.get(index)
        if facts is None:
            entries.append(captured)
            continue
        sha, flags, extents = facts
        # The usual file goes straight to its line: no second FileMeta (a cache records entries, and a first
        # name's facts are copied to its other names, so those take the long way).
        if (not planned.record and extents is None and captured.nlink in (None, 1)
                and (line := file_line(captured, sha, flags)) is not None):
            lines.append((captured.path, line))
            continue
        entries.append(read_entries.setdefault(captured.path, with_content(captured, sha, flags, extents)))
    recorded: list[Recorded] = []
    for entry in fill_hardlinks(entries, read_entries):
        line = encode_entry(entry)
        lines.append((entry.path, line))
        if planned.record:
            recorded.append((entry, line))
    return sorted_lines(name, all_noatime, lines), recorded


#: An entry as the manifest holds it, and its line: what a stat cache records.
Recorded = tuple[FileMeta, str]
#: :meth:`~artifactkit.engine.protocol.Engine.encode`.
Encoder = Callable[[str, ScannedTree, Plan, Sequence[Staged]], "SortedLines | None"]


def claim_version(txn: PublishTxn, guard: Guard, name: str, body: bytes, digest: str) -> ArtifactRef:
    """Claim the next free version of ``name`` for the flushed manifest: the one loop over every backend's
    atomic claim (local: ``RENAME_NOREPLACE`` under the name's lock; bucket: ``PUT If-None-Match: *``)."""
    version = txn.latest(name) + 1
    while True:
        guard.check()  # a publisher whose lease lapsed may have lost blobs to gc: it must not commit
        if txn.claim(name, version, body, digest):
            return ArtifactRef(name, version, digest)
        # Taken: others may have taken several meanwhile, so look again rather than count up one by one.
        version = max(version + 1, txn.latest(name) + 1)

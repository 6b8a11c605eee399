"""The *plan* stage of a publish: which files must be read, and what is already known without reading.

The default plans a read of every regular file (one read per inode: a hard link's later names take its first
name's facts). The stat cache (:mod:`~artifactkit.store.stat_cache`) is the other planner: entries it
recognizes come with their manifest lines, files whose inode state it recorded with their content, and an
unchanged tree with its whole recorded manifest. Either way the plan is plain values; the engine and the
assembly of the manifest never see the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from artifactkit.engine.reference.scan import capture_again
from artifactkit.engine.values import ScannedTree, StageItem
from artifactkit.metadata.model import Extents, FileMeta

if TYPE_CHECKING:
    from artifactkit.engine.blob_check import HasBlob
    from artifactkit.engine.ports import PlanCache, StagingTxn
    from artifactkit.manifest.artifact_ref import ArtifactRef

#: What a read found, or a content hit knew: ``(sha256, inode flags, data extents)``.
Content = tuple[str, int | None, Extents | None]


@attrs.frozen
class Plan:
    """What a publish reads and what it knows already.

    ``entries``: every captured entry in manifest order (the scan's, then those captured again); ``reads``:
    the files among them to read, by index; ``known``: content by index, not read; ``lines``: manifest lines
    already encoded (a cache's entry hits); ``reuse``: the whole manifest and its digest, when a cache proved
    the tree unchanged; ``record``: build every entry with its line (a cache records them).
    """

    has_blob: HasBlob
    entries: Sequence[FileMeta]
    reads: Sequence[StageItem]
    known: dict[int, Content]
    lines: list[tuple[str, str]]
    reuse: tuple[bytes, str] | None = None
    record: bool = False
    #: The bytes of ``reads``, for the progress totals.
    read_bytes: int = 0
    #: The position of ``entries[0]`` among the publish's entries: a part of a publish in parts
    #: (:mod:`~artifactkit.store.publish_parts`) numbers its reads after the parts before it, so no two of the
    #: publish's reads stage under one name.
    base: int = 0


def plan_reads(tree: ScannedTree, name: str, txn: StagingTxn, cache: PlanCache | None, *,
               read_manifest: Callable[[ArtifactRef], bytes]) -> Plan:
    """The plan of publishing ``tree`` as ``name`` into ``txn``: every file read, unless ``cache`` vouches for
    it and its blob is still stored (asked of ``txn`` under the publish guard, so gc cannot take it)."""
    if cache is None:  # every file read: the capture plans its own reads (the core's without making an entry)
        planned, byte_count = tree.entries.planned_reads(tree.identities)
        return Plan(txn.blob_lookup(tree.entries.file_count()), tree.entries, planned, {}, [], read_bytes=byte_count)
    # One answer for the hits and the reads: a new file's missing blob cost a stat and its exception
    # (4.1 us) where the usual new store lists in microseconds.
    has_blob = txn.blob_lookup(len(tree.cached) + len(tree.matched)
                               + sum(1 for e in tree.entries if e.kind == "file"))
    if cache is not None:
        same = cache.unchanged_manifest(read_manifest, name, len(tree.identities), tree.listed_noatime, has_blob)
        if same is not None:  # an unchanged tree: the recorded version's manifest, verified, is this one's
            return Plan(has_blob, [], [], {}, [], reuse=same)
    lines, again = _cached_lines(tree, has_blob, cache)
    entries = [*tree.entries, *again]
    known: dict[int, Content] = {}
    reads: list[StageItem] = []
    read_bytes = 0
    for index, entry in enumerate(entries):
        if entry.kind != "file" or entry.hardlink is not None:
            continue  # a later name of a hard link gets its first name's facts when the manifest is assembled
        identity = tree.identities[entry.path]
        # A content hit: not read, nothing staged (a digest whose blob gc took is read and stored again).
        hit = cache.lookup(entry, identity) if cache is not None else None
        if hit is not None and has_blob(hit.sha256, entry.size):
            known[index] = (hit.sha256, hit.flags, hit.extents)
        else:
            reads.append((index, entry, identity))
            read_bytes += entry.size
    return Plan(has_blob, entries, reads, known, lines, record=cache is not None, read_bytes=read_bytes)


def _cached_lines(tree: ScannedTree, has_blob: HasBlob,
                  cache: PlanCache | None) -> tuple[list[tuple[str, str]], list[FileMeta]]:
    """The manifest lines of the entries the stat cache recognized whose blob is still here, and the
    rest of them captured again (as the scan would have), to read."""
    hits = tree.cached
    gone: list[str] = []
    if cache is not None and tree.matched:  # whole listings matched: their lines are the recorded ones
        matched, gone = cache.matched_lines(tree.matched)
        hits = {**hits, **matched}
    lines = []
    for path, (line, sha) in hits.items():  # one pass: it runs once per entry of an unchanged tree
        if sha is None or has_blob(sha, None):
            lines.append((path, line))
        else:
            gone.append(path)
    again = []
    for path in sorted(gone):  # gc took the blob: read and store it again
        again.append(capture_again(tree, path))
        if cache is not None:
            cache.forget(path)
    return lines, again

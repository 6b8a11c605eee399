"""A download of a large format-3 version in parts: memory bounded by a part, not by the tree (issue 52).

The tree is walked in path order (:mod:`~artifactkit.manifest.tree_parts`) and made a part of
:data:`~artifactkit.manifest.tree_parts.PART_ENTRIES` entries at a time, each part parsed by the engine as a
format-2 listing and created as any tree is (:meth:`~artifactkit.engine.protocol.Engine.create`), into the one
private directory the whole download is built in, then renamed into place: every guarantee of a whole download
holds. What a part adds to its listing, so that the engine's parse checks it as it checks a whole manifest:

- the directories it lies in that an earlier part made, with their lines (every entry's parent is listed);
- the first name of each hard link whose later name it holds, looked up in the tree, with the directories on its
  way: the later name's claims are checked against it, and it is linked to, never made again.

A directory's metadata and times are applied by the part after which nothing more goes into it (deepest first, as
ever), so a directory that forbids writing is sealed only once it is full. The counts the manifest states are
checked when the walk ends, before the last part is made; nothing is renamed into place before.

Used for a whole download (no ``--path``) of ``owners="exact"`` onto a filesystem whose client keeps no attribute
cache. The rest stay whole downloads (:func:`~artifactkit.store.download.restore_tree`): ``owners="current"`` lists
every re-owned entry in one warning, a read-back past a cache needs every entry at once, and a ``--path`` selection
makes a first name of a hard link whose first is left out. One difference a large tree shows: an owner this user
cannot restore is refused by the part that meets it, naming that part's entries (a whole download names all).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import attrs

from artifactkit.engine.blobs import BlobsNeeded
from artifactkit.engine.protocol import CreateJob, Engine
from artifactkit.engine.values import Layout, Owners, Parsed
from artifactkit.manifest import tree_parts
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.encode import digest_of
from artifactkit.manifest.limits import decode_text
from artifactkit.manifest.tree_format import is_tree_manifest
from artifactkit.manifest.tree_parts import PathOrderWalk, TreePart, first_names
from artifactkit.manifest.tree_read import Fetch, TreeRoot, listing_body, parse_root
from artifactkit.store import download
from artifactkit.store.backend import Opened
from artifactkit.store.manifest_file import verified_entries
from artifactkit.store.progress import Reporter
from artifactkit.store.versions import store_fetch

_LATER_NAME: Final = '"hardlink": '


@attrs.frozen
class LargeTree:
    """A version to download in parts: its checked root and how its objects are read."""

    ref: ArtifactRef
    root: TreeRoot
    fetch: Fetch


def large_tree(opened: Opened, ref: ArtifactRef, read: tuple[bytes, str], dest: str,
               owners: Owners) -> LargeTree | None:
    """``ref`` as a :class:`LargeTree` if a download of it to ``dest`` is made in parts (a format-3 version of more
    than :data:`~artifactkit.manifest.tree_parts.PART_ENTRIES` entries, every owner exact, onto a filesystem
    without a client cache); else ``None``."""
    if owners != "exact" or download.may_cache(os.path.dirname(dest)):
        return None
    # ``read``: the manifest's bytes and where, no digest checked yet (a whole download checks it as it parses).
    body, where = read
    if not is_tree_manifest(body):
        return None
    root = parse_root(body, where=f"manifest of {ref}")
    if root.name != ref.name or root.entries <= tree_parts.PART_ENTRIES:
        return None  # a small tree, or another artifact's (the whole download's parse refuses it, naming both)
    check_manifest_digest(ref, body, where)
    return LargeTree(ref, root, store_fetch(opened, None))


def download_in_parts(opened: Opened, tree: LargeTree, dest: str, *, engine: Engine,
                      progress: Reporter) -> tuple[str, ...]:
    """Make ``tree`` at ``dest`` (absent) a part at a time, exactly as :func:`~artifactkit.store.download.restore_tree`
    makes a whole one; returns the fields left unverified: ``()``, as a download in parts is chosen only where no client
    cache is (:data:`~artifactkit.store.fresh_looks.CACHED` should the mount have changed since)."""
    where = f"manifest of {tree.ref}"

    def fill(root_fd: int, engine: Engine, reporter: Reporter) -> None:
        # Entries counted a part at a time (its directories and later names too: every entry but the root), bytes as
        # the engine's batches finish.
        reporter.phase("create", entries_total=tree.root.entries - 1, bytes_total=tree.root.file_bytes)
        parts = _prepared(tree, engine, where)
        # The next part is walked, parsed and laid out on a thread of its own while the engine makes this one (the
        # core lets go of the interpreter as it works): two parts are held at most.
        with ThreadPoolExecutor(1, thread_name_prefix="artifactkit-parts") as ahead:
            coming = ahead.submit(next, parts, None)
            while (prepared := coming.result()) is not None:
                coming = ahead.submit(next, parts, None)
                layout, needed, entries = prepared
                with opened.blob_source(needed, dest, Reporter(None)) as blobs:
                    engine.create(CreateJob(root_fd, blobs,
                                            on_batch=lambda _, byte_count: reporter.advance(0, byte_count)), layout)
                reporter.advance(entries)
    return download.build_in_place(dest, fill, engine=engine, progress=progress, entries=None)


def _prepared(tree: LargeTree, engine: Engine, where: str) -> Iterator[tuple[Layout, BlobsNeeded, int]]:
    """Each part's layout, the blobs it reads and its count of entries, in order."""
    walk = PathOrderWalk(tree.root, tree.fetch, where=where)
    for part in tree_parts.in_parts(walk, tree_parts.PART_ENTRIES):
        entries = len(part.lines)
        parsed, made_before, unsealed = _part_listing(tree, part, engine, where)
        yield (attrs.evolve(parsed.layout("exact"), made_before=made_before, unsealed=unsealed), parsed.blobs(),
               entries)


def _part_listing(tree: LargeTree, part: TreePart, engine: Engine,
                  where: str) -> tuple[Parsed, frozenset[str], frozenset[str]]:
    """A part parsed as the engine parses a manifest, with what it stands on; the paths made before it, and the
    directories it leaves unsealed."""
    own = {path for path, _ in part.lines}
    lines = dict(part.made_before)
    wanted: set[str] = set()
    for _, line in part.lines:
        if _LATER_NAME in line:
            raw = decode_text(line, where=where)
            target = raw.get("hardlink") if isinstance(raw, dict) else None
            if isinstance(target, str) and target not in own:
                wanted.add(target)
    looked_up = first_names(tree.root, tree.fetch, sorted(wanted), where=where)
    lines.update(looked_up)
    made_before = frozenset(lines)
    # A directory on the way to a first name is sealed already (or will be, by the part that fills it).
    unsealed = part.still_open | (made_before - {path for path, _ in part.made_before})
    lines.update(part.lines)
    part.lines.clear()
    body = listing_body(tree.root, list(lines.items()))
    ref = ArtifactRef(tree.ref.name, tree.ref.version, digest_of(body))
    parsed = verified_entries(ref, body, where, engine)
    return parsed, made_before, unsealed

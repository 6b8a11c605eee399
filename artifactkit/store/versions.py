"""A version read from any backend: a format 1 or 2 manifest as it is, a format-3 manifest's tree walked through
the backend's objects (each verified before it is used), and what verify, gc and download need of either."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import attrs

from artifactkit.engine.protocol import Engine
from artifactkit.engine.values import Parsed
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.encode import Manifest, digest_of
from artifactkit.manifest.tree_format import is_tree_manifest
from artifactkit.manifest.tree_read import Fetch, TreeRoot, listing_body, parse_root, read_tree
from artifactkit.manifest.tree_write import split_manifest
from artifactkit.store.backend import Opened
from artifactkit.store.manifest_file import verified_entries, verified_manifest

T = TypeVar("T")
R = TypeVar("R")
#: Calls :func:`each` starts ahead of the one whose result it yields, per thread.
AHEAD = 4


def each(opened: Opened, function: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``map`` at the backend's concurrency: a bucket's requests overlap, a local disk's reads do not. At most
    :data:`AHEAD` calls per thread are started ahead of the result taken: ``items`` may be a store's every blob,
    read from a file as they are needed (``Executor.map`` would take them all, and hold a future for each)."""
    if opened.concurrency <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(opened.concurrency, thread_name_prefix="artifactkit-store") as pool:
        started: collections.deque[Future[R]] = collections.deque()
        try:
            for item in items:
                started.append(pool.submit(function, item))
                if len(started) >= AHEAD * opened.concurrency:
                    yield started.popleft().result()
            while started:
                yield started.popleft().result()
        finally:
            for future in started:
                future.cancel()


@attrs.frozen
class Listing:
    """A version's entries as format 2's canonical text (``body``, hashing to ``ref.digest``: for a format-3
    version, the digest of the walked listing, not of its manifest), read at ``where``, and the tree objects it
    stands on (digest -> size; none for formats 1 and 2)."""

    ref: ArtifactRef
    body: bytes
    where: str
    objects: dict[str, int]


@attrs.frozen
class VersionTree:
    """A version as a tree: its format-3 root and how to read its objects (a format 1 or 2 manifest's, made in
    memory from its verified entries)."""

    root: TreeRoot
    fetch: Fetch
    objects: dict[str, int]


def store_fetch(opened: Opened, sizes: dict[str, int] | None) -> Fetch:
    """Objects read through ``opened`` (at its concurrency), their sizes noted in ``sizes`` (``None``: kept nowhere,
    for a walk whose memory must not grow with the tree)."""
    def fetch(digests: Sequence[str]) -> list[bytes]:
        found = list(each(opened, opened.tree_object, digests))
        if sizes is not None:
            sizes.update((digest, len(data)) for digest, data in zip(digests, found, strict=True))
        return found
    return fetch


def version_tree(opened: Opened, ref: ArtifactRef) -> VersionTree:
    """``ref``'s tree, whatever its format (the manifest's digest checked first)."""
    body, where = opened.manifest_bytes(ref, check_digest=False)
    check_manifest_digest(ref, body, where)
    sizes: dict[str, int] = {}
    if is_tree_manifest(body):
        return VersionTree(parse_root(body, where=f"manifest of {ref}"), store_fetch(opened, sizes), sizes)
    made = split_manifest(verified_manifest(ref, body, where).to_bytes())
    return VersionTree(parse_root(made.root, where=f"manifest of {ref}"),
                       lambda digests: [made.objects[digest] for digest in digests], sizes)


def proven_manifest(opened: Opened, ref: ArtifactRef) -> bytes:
    """``ref``'s manifest, its digest checked, and, for format 3, every object of its tree read and verified: what a
    publish may commit again as a new version (a stat cache's unchanged tree) only once its whole tree is proven
    stored (a gc killed midway may have left some objects of a forgotten version and not others)."""
    body = opened.manifest_bytes(ref)[0]
    if is_tree_manifest(body):
        read_tree(parse_root(body, where=f"manifest of {ref}"), store_fetch(opened, None), where=f"manifest of {ref}")
    return body


def version_listing(opened: Opened, ref: ArtifactRef, *, select: Sequence[str] | None = None,
                    read: tuple[bytes, str] | None = None) -> Listing:
    """The entries of ``ref`` (``select``: only those at and under these paths, and the directories on the way),
    each tree object verified as it is read (``read``: as :func:`read_entries`)."""
    body, where = read or opened.manifest_bytes(ref, check_digest=False)
    if select is None and not is_tree_manifest(body):
        return Listing(ref, body, where, {})  # its digest is checked as it is parsed, as ever
    tree = version_tree(opened, ref) if not is_tree_manifest(body) else None
    if tree is None:
        check_manifest_digest(ref, body, where)
        sizes: dict[str, int] = {}
        tree = VersionTree(parse_root(body, where=f"manifest of {ref}"), store_fetch(opened, sizes), sizes)
    lines = read_tree(tree.root, tree.fetch, where=f"manifest of {ref}", select=select)
    listing = listing_body(tree.root, lines)
    return Listing(ArtifactRef(ref.name, ref.version, digest_of(listing)), listing, where, tree.objects)


def read_manifest(opened: Opened, ref: ArtifactRef) -> tuple[Manifest, dict[str, int]]:
    """The verified manifest of ``ref`` (every entry) and the tree objects it stands on."""
    listing = version_listing(opened, ref)
    manifest = verified_manifest(listing.ref, listing.body, listing.where)
    return Manifest(ref.name, manifest.entries, manifest.source_read_noatime), listing.objects


def read_entries(opened: Opened, ref: ArtifactRef, engine: Engine, *, select: Sequence[str] | None = None,
                 read: tuple[bytes, str] | None = None) -> Parsed:
    """The entries of ``ref`` as ``engine`` parses them for a download (``select``: a part of the tree; ``read``: its
    manifest's bytes and where, read already with no digest checked)."""
    listing = version_listing(opened, ref, select=select, read=read)
    return verified_entries(listing.ref, listing.body, listing.where, engine)

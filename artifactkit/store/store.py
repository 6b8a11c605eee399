"""The public face of a store: :class:`Store` ties layout, publish, download, verify and gc together.

How each step works lives in its own module (:mod:`~artifactkit.store.publish`,
:mod:`~artifactkit.store.download`, :mod:`~artifactkit.store.verify`, :mod:`~artifactkit.store.gc`);
this class only resolves names to versions and holds the store-wide lock where a step needs it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
from typing import Any, Final

from artifactkit.store.download import BlobSource, restore_tree
from artifactkit.store.gc import GcReport, collect_garbage
from artifactkit.store.layout import ArtifactRef, StoreLayout, parse_ref
from artifactkit.store.locks import store_lock
from artifactkit.store.manifest import Manifest
from artifactkit.store.manifest_file import read_manifest
from artifactkit.store.paths import LinkPolicy, check_artifact_name, check_link_policy
from artifactkit.store.publish import Staging, capture_source, commit_manifest, publish_tree
from artifactkit.store.restore_meta import Owners
from artifactkit.store.stat_cache import StatCache, inode_clock_ns
from artifactkit.store.store_dirs import StoreDirs, opened_store
from artifactkit.store.verify import VerifyReport, verify_store
from artifactkit.store.workers import LazyPool

#: A manifest entry of a plain file takes ~250 bytes of JSON; a lower guess would start workers for
#: trees too small to need them.
_MANIFEST_BYTES_PER_ENTRY: Final = 250


class Store:
    """Publish trees into, and download them out of, a store rooted at ``root``."""

    def __new__(cls, root: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Store:
        # ``Store("s3://bucket/prefix")`` is a bucket store (a subclass). It is looked up by name, like
        # an entry point, so the local store never imports boto3's world (nor its own subclass).
        if cls is Store and isinstance(root, str) and root.startswith("s3://"):
            backend: type[Store] = importlib.import_module("artifactkit.store.s3.store").S3Store
            return super().__new__(backend)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.layout = StoreLayout.at(root)
        self.root = self.layout.root
        self._layout_durable = False

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def _ensure_layout(self) -> None:
        # Once per Store: creating and flushing the layout dirs costs four fsyncs.
        if not self._layout_durable:
            self.layout.create()
            self._layout_durable = True

    def _commit_manifest(self, dirs: StoreDirs, name: str, staged: Staging, digest: str) -> ArtifactRef:
        # A method, not a plain call, so a fault test can subclass the commit step.
        return commit_manifest(dirs, name, staged, digest)

    def publish(self, src: str | os.PathLike[str], name: str, *, stat_cache: bool = False,
                workers: int | None = None, links: LinkPolicy = "as-is") -> ArtifactRef:
        """Publish the tree at ``src`` as the next version of ``name``; visible only once complete.

        By default every byte is read and hashed. ``stat_cache=True`` skips files whose inode, size,
        mtime and ctime are as the store's stat cache recorded them, long enough ago (see
        :mod:`artifactkit.store.stat_cache` for exactly what that trusts), and refreshes the cache.
        ``workers``: how many processes read and stage files (``None``: one for small trees, else the
        cores available; see :func:`artifactkit.store.workers.choose_workers`). Every guarantee is the same.
        ``links``: every symlink is data, recorded with its target as it is (``"as-is"``, the default);
        ``"contained"`` refuses a tree with links that may leave it, naming them all (``UnsafePathError``).
        """
        check_artifact_name(name)
        check_link_policy(links)
        self.layout.check_site()  # before the scan: a path that is no store fails at once
        # Sampled before the scan: the racy rule's reference for what this publish records.
        cache = StatCache.load(self.layout, inode_clock_ns()) if stat_cache else None
        with LazyPool(workers, "publish") as pool:
            # The workers start during the scan once enough entries need reading: their start-up overlaps it.
            # A source that cannot be published creates no store.
            tree = capture_source(src, on_progress=pool.expect, cached=cache, links=links)
            self._ensure_layout()
            with opened_store(self.layout, create=True) as dirs:  # a layout dir removed meanwhile is made again
                ref = publish_tree(dirs, tree, name, commit=self._commit_manifest, cache=cache, pool=pool)
                if cache is not None:
                    cache.save(dirs, ref, list(tree.identities))
        return ref

    def list(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version (:class:`NotAStoreError` if no store)."""
        with opened_store(self.layout) as dirs:
            return dirs.refs()

    def resolve(self, name_or_ref: str | ArtifactRef, version: int | None = None) -> ArtifactRef:
        """Find a version: an :class:`ArtifactRef`, ``name`` (latest), ``name@V``, or ``name`` + ``version``."""
        if isinstance(name_or_ref, ArtifactRef):
            return name_or_ref
        with opened_store(self.layout) as dirs:
            return self._resolve_in(dirs, name_or_ref, version)

    def _resolve_in(self, dirs: StoreDirs, name_or_ref: str | ArtifactRef, version: int | None) -> ArtifactRef:
        # The look-up of resolve in a store already opened: manifest and download check the store once.
        if isinstance(name_or_ref, ArtifactRef):
            return name_or_ref
        name, version = parse_ref(name_or_ref, version)
        versions = dirs.versions(name)
        if not versions:
            raise LookupError(f"no artifact named {name!r} in {self.root}")
        if version is None:
            found_version, digest = versions[-1]
            return ArtifactRef(name, found_version, digest)
        for found_version, digest in versions:
            if found_version == version:
                return ArtifactRef(name, version, digest)
        raise LookupError(f"{name!r} has no version {version} (latest is {versions[-1][0]})")

    def manifest(self, ref: str | ArtifactRef, version: int | None = None) -> Manifest:
        """The verified manifest of a version: its bytes must hash to the digest that names it."""
        with opened_store(self.layout) as dirs:
            return read_manifest(dirs, self._resolve_in(dirs, ref, version))

    def download(self, name_or_ref: str | ArtifactRef, dest: str | os.PathLike[str],
                 version: int | None = None, owners: Owners = "exact", workers: int | None = None) -> ArtifactRef:
        """Materialize a version at ``dest`` (which must not exist) with exact metadata, or nothing.

        ``owners="exact"`` (default) restores every owner and refuses (:class:`NotRestorableError`)
        where this user cannot; ``owners="current"`` takes the downloader's ownership and clears
        setuid/setgid and privileged xattrs of the re-owned entries (a :class:`ReownedWarning` lists them).
        ``workers``: how many processes create the files (``None``: one for small trees, else the cores
        available; see :func:`artifactkit.store.workers.choose_workers`). Every guarantee is the same.
        """
        target = os.path.abspath(os.fspath(dest))
        with opened_store(self.layout) as dirs, LazyPool(workers, "download") as pool:
            ref = self._resolve_in(dirs, name_or_ref, version)
            if os.path.lexists(target):
                raise FileExistsError(errno.EEXIST, "download destination already exists", target)
            # Workers start before the manifest is parsed (sized from its bytes), so their start-up overlaps it.
            name_fd = dirs.name_dir(ref.name)
            if name_fd is not None:
                with contextlib.suppress(OSError):
                    pool.expect(os.stat(f"{ref.version}.{ref.digest}.json", dir_fd=name_fd).st_size
                                // _MANIFEST_BYTES_PER_ENTRY)
                os.close(name_fd)
            # This process reads blobs through the checked fd of blobs/; workers by path (digest-checked).
            restore_tree(read_manifest(dirs, ref).entries, target,
                         blob_path=BlobSource(self.layout.blobs_dir, pool, dir_fd=dirs.blobs),
                         shape_checked=True, owners=owners)
        return ref

    def verify(self) -> VerifyReport:
        """Check every manifest and blob without changing anything (:class:`NotAStoreError` if no store)."""
        with opened_store(self.layout) as dirs:
            return verify_store(dirs)

    def gc(self, *, dry_run: bool = False) -> GcReport:
        """Remove unreferenced blobs and abandoned staging, excluding every publisher meanwhile; ``dry_run``:
        report what would go (and the bytes it would free) and remove nothing."""
        # create: only the layout dirs an older store lacks; a mistyped path is NotAStoreError, never grown.
        with (opened_store(self.layout, create=True) as dirs,
              store_lock(dirs.locks, exclusive=True, where=dirs.layout.locks_dir)):
            return collect_garbage(dirs, dry_run=dry_run)

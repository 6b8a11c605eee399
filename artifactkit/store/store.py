"""The public face of a store: one :class:`Store` over a :class:`~artifactkit.store.backend.Backend`.

The backend is chosen from the URL scheme through :data:`BACKENDS` (dotted names imported on first use, as
fsspec's registry: the local store never imports a bucket client). Everything a store does is written once
here and in the modules it composes: resolve and list below, publish's stages
(:mod:`~artifactkit.store.publish`), the restore (:mod:`~artifactkit.store.download`), verify's mark
(:mod:`~artifactkit.store.verify`) and gc's sweep (:mod:`~artifactkit.store.gc`).
"""

from __future__ import annotations

import errno
import importlib
import os
import warnings
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, closing
from typing import Any, Final

from artifactkit.engine.select import engine_for
from artifactkit.engine.values import Owners
from artifactkit.errors import IntegrityError, ManifestLimitError, UnreadableManifestWarning
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import Manifest
from artifactkit.manifest.paths import LinkPolicy, check_artifact_name, check_link_policy
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.store.backend import Backend, Opened
from artifactkit.store.diff import diff_versions
from artifactkit.store.download import restore_tree
from artifactkit.store.download_parts import download_in_parts, large_tree
from artifactkit.store.downloaded import Downloaded
from artifactkit.store.forget import Wanted, forget_versions
from artifactkit.store.gc import GcReport, collect_garbage
from artifactkit.store.layout import parse_ref
from artifactkit.store.progress import ProgressCallback, Reporter
from artifactkit.store.publish import capture_source, publish_tree
from artifactkit.store.publish_parts import PartedCapture, capture_source_or_parts, publish_in_parts
from artifactkit.store.stat_cache import inode_clock_ns
from artifactkit.store.verify import VerifyReport, verify_store
from artifactkit.store.versions import each, read_entries, read_manifest

#: URL scheme -> ``module:class`` of its backend. A path (no scheme) and ``file://`` are local directories.
BACKENDS: Final = {
    "": "artifactkit.store.local_backend:LocalBackend",
    "file": "artifactkit.store.local_backend:LocalBackend",
    "s3": "artifactkit.store.s3.backend:S3Backend",
}


def backend_for(root: str | os.PathLike[str], **options: Any) -> Backend:
    """The backend of the store at ``root``, its module imported now (``options`` go to its constructor)."""
    text = os.fspath(root)
    scheme = text.partition("://")[0] if "://" in text else ""
    if scheme not in BACKENDS:
        raise ValueError(f"{text!r}: no store backend for {scheme}:// (known: a path, "
                         f"{', '.join(s + '://' for s in BACKENDS if s)})")
    module, _, name = BACKENDS[scheme].partition(":")
    backend: Backend = getattr(importlib.import_module(module), name)(text, **options)
    return backend

#: What ``forget`` returns (named here: inside :class:`Store`, ``list`` is its method).
Refs = list[ArtifactRef]
#: What ``diff`` returns.
Changes = list[Mismatch]


class Store:
    """Publish trees into, and download them out of, the store at ``root``: a local path or
    ``s3://bucket/prefix`` (``options``: the backend's, e.g. a bucket's lease ``policy``), or a
    :class:`~artifactkit.store.backend.Backend` built by the caller (a fault test's broken one)."""

    def __init__(self, root: str | os.PathLike[str] | Backend, **options: Any) -> None:
        self.backend = backend_for(root, **options) if isinstance(root, str | os.PathLike) else root
        self.root = self.backend.root

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def __getattr__(self, name: str) -> Any:
        # What only one backend has (a local store's ``layout``, a bucket's ``bucket`` and ``policy``) is read
        # through the store, as before there was one class; anything else is still an AttributeError.
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)

    def _open(self, *, create: bool = False, writes: bool = False) -> AbstractContextManager[Opened]:
        return self.backend.open(create=create, writes=writes)

    def publish(self, src: str | os.PathLike[str], name: str, *, stat_cache: bool = False,
                workers: int | None = None, links: LinkPolicy = "as-is",
                progress: ProgressCallback | None = None) -> ArtifactRef:
        """Publish the tree at ``src`` as the next version of ``name``; visible only once complete.

        By default every byte is read and hashed. ``stat_cache=True`` skips files whose inode, size,
        mtime and ctime are as the store's stat cache recorded them, long enough ago (see
        :mod:`artifactkit.store.stat_cache` for exactly what that trusts), and refreshes the cache.
        ``workers``: how many of the native core's threads read and stage files (``None``: the cores this
        process may use); on the reference engine (``ARTIFACTKIT_ENGINE=python``, or where the core is not
        built) it is accepted and has no effect: the reference is one process by design. Every guarantee is
        the same. ``links``: every symlink is data, recorded with its target as it is
        (``"as-is"``, the default); ``"contained"`` refuses a tree with links that may leave it, naming them
        all (``UnsafePathError``). ``progress``: called with a :class:`Progress` at each phase and batch.
        """
        check_artifact_name(name)
        reporter = Reporter(progress)
        check_link_policy(links)
        self.backend.check_site()  # before the scan: a path that is no store fails at once
        # Sampled before the scan: the racy rule's reference for what this publish records.
        cache = self.backend.stat_cache(inode_clock_ns()) if stat_cache else None
        with closing(engine_for(workers, "publish")) as engine:
            # A source whose scan fails creates no store (one whose read fails later leaves the new store empty).
            reporter.phase("scan")
            # The default publish takes a large tree in parts; a stat cache answers for a whole tree's listings, and
            # links="contained" names every link that leaves it before anything is read.
            tree = capture_source_or_parts(src, reporter.reached, engine=engine) if cache is None and links == "as-is" \
                else capture_source(src, on_progress=reporter.reached, cached=cache, links=links, engine=engine)
            with self._open(create=True) as opened:
                if isinstance(tree, PartedCapture):
                    return publish_in_parts(opened, tree, name, engine=engine, progress=reporter)
                ref = publish_tree(opened, tree, name, engine=engine, cache=cache, progress=reporter)
                if cache is not None:
                    opened.save_stat_cache(cache, ref, list(tree.identities))
        return ref

    def list(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version (:class:`NotAStoreError` if no store).

        A version whose manifest cannot be read (a bucket's object whose bytes do not match its pin, or over
        the size limit) is left out with an :class:`UnreadableManifestWarning` naming it: one bad object
        written by anyone must not hide every other version. ``verify`` reports it as corrupt or unreadable.
        """
        with self._open() as opened:
            found = list(each(opened, lambda pair: _readable_ref(opened, *pair), opened.versions()))
        return sorted(ref for ref in found if ref is not None)

    def resolve(self, name_or_ref: str | ArtifactRef, version: int | None = None) -> ArtifactRef:
        """Find a version: an :class:`ArtifactRef`, ``name`` (latest), ``name@V``, or ``name`` + ``version``."""
        if isinstance(name_or_ref, ArtifactRef):
            return name_or_ref
        with self._open() as opened:
            return _resolve_in(opened, name_or_ref, version)

    def manifest(self, ref: str | ArtifactRef, version: int | None = None) -> Manifest:
        """The verified manifest of a version: its bytes must hash to the digest that names it."""
        with self._open() as opened:
            resolved = _resolve_in(opened, ref, version)
            return read_manifest(opened, resolved)[0]  # every byte checked against its digest

    def download(self, name_or_ref: str | ArtifactRef, dest: str | os.PathLike[str],
                 version: int | None = None, owners: Owners = "exact", workers: int | None = None, *,
                 progress: ProgressCallback | None = None, paths: Sequence[str] | None = None) -> Downloaded:
        """Materialize a version at ``dest`` (which must not exist) with exact metadata, or nothing.

        ``owners="exact"`` (default) restores every owner and refuses (:class:`NotRestorableError`)
        where this user cannot; ``owners="current"`` takes the downloader's ownership and clears
        setuid/setgid and privileged xattrs of the re-owned entries (a :class:`ReownedWarning` lists them).
        ``workers`` and ``progress`` as :meth:`publish`'s. ``paths``: only these entries (relative paths) and
        everything under them, with the directories on the way to them, each as recorded; of a format-3 version
        only the tree objects on their way are read (:class:`LookupError` for a path the version lacks). Every
        guarantee is the same. Returns the version as a :class:`~artifactkit.store.downloaded.Downloaded` ref
        naming any field it could not verify (``unverified``: the times on a filesystem whose client may cache them).
        """
        target = os.path.abspath(os.fspath(dest))
        with self._open() as opened, closing(engine_for(workers, "download")) as engine:
            name, number = _chosen(opened, name_or_ref, version)
            if os.path.lexists(target):
                raise FileExistsError(errno.EEXIST, "download destination already exists", target)
            # Held from before the manifest is read until the last blob is: no forget removes it meanwhile.
            with opened.holding(name, number):
                ref = name_or_ref if isinstance(name_or_ref, ArtifactRef) else _ref_in(opened, name, number)
                read = opened.manifest_bytes(ref, check_digest=False)
                large = None if paths is not None else large_tree(opened, ref, read, target, owners)
                if large is not None:
                    unverified = download_in_parts(opened, large, target, engine=engine, progress=Reporter(progress))
                    return Downloaded(ref.name, ref.version, ref.digest, unverified=unverified)
                entries = read_entries(opened, ref, engine, select=None if paths is None else list(paths), read=read)
                needed = entries.blobs()
                reporter = Reporter(progress)
                reporter.phase("fetch", entries_total=needed.count, bytes_total=needed.size)
                with opened.blob_source(needed, target, reporter) as blobs:
                    unverified = restore_tree(entries, target, blob_path=blobs, owners=owners, engine=engine,
                                              progress=reporter)
        return Downloaded(ref.name, ref.version, ref.digest, unverified=unverified)

    def diff(self, a: str | ArtifactRef, b: str | ArtifactRef) -> Changes:
        """What changed from version ``a`` to ``b`` (each a ref or ``name@V``): every entry removed (diagnosis
        ``missing``), added (``unexpected``) and changed (each field, ``a``'s value as expected, ``b``'s as actual,
        the shared assertion's diagnosis), in path order. Of format-3 versions only the directories whose tree
        objects differ are read."""
        with self._open() as opened:
            return diff_versions(opened, _resolve_in(opened, a, None), _resolve_in(opened, b, None))

    def verify(self, *, progress: ProgressCallback | None = None) -> VerifyReport:
        """Check every manifest and blob without changing anything (:class:`NotAStoreError` if no store)."""
        with self._open() as opened:
            return verify_store(opened, Reporter(progress))

    def gc(self, *, grace_s: float | None = None, dry_run: bool = False,
           progress: ProgressCallback | None = None) -> GcReport:
        """Remove unreferenced blobs and abandoned staging, excluding every publisher meanwhile; ``dry_run``:
        report what would go (and the bytes it would free) and remove nothing.

        ``grace_s``: leftovers younger than this are kept, and reported as kept (``None``: the store's default,
        0 for a local store, whose lock proves no publisher runs; a bucket's lease policy's hour, the defence of
        a publisher stalled past its lease). 0 removes every leftover no running operation holds.
        """
        # writes: only the layout dirs an older store lacks; a mistyped path is NotAStoreError, never grown.
        with self._open(writes=True) as opened:
            return collect_garbage(opened, grace_s=grace_s, dry_run=dry_run, progress=Reporter(progress))

    def forget(self, name: str, versions: Collection[int] | None = None, keep_last: int | None = None, *,
               dry_run: bool = False) -> Refs:
        """Remove versions of ``name`` from the store's list: ``versions``, or all but the newest ``keep_last``
        (at least 1); the removed refs, sorted. ``gc`` then frees what only they used.

        Each version goes in one unlink or DELETE of its manifest. A missing name or version is
        :class:`LookupError`, a version a running download holds :class:`VersionInUseError`; either way nothing
        is removed. A name's forgotten newest number is never given to a later publish. ``dry_run``: the refs
        that would go, nothing removed.
        """
        return self.forget_many({name: versions}, keep_last=keep_last, dry_run=dry_run)

    def forget_many(self, wanted: Wanted, *, keep_last: int | None = None,
                    dry_run: bool = False) -> Refs:
        """:meth:`forget` of several names at once, all or none: ``{name: versions, or None for keep_last}``."""
        with self._open(writes=True) as opened:
            return forget_versions(opened, wanted, keep_last=keep_last, dry_run=dry_run)


def _resolve_in(opened: Opened, name_or_ref: str | ArtifactRef, version: int | None) -> ArtifactRef:
    """The look-up of :meth:`Store.resolve` in a store already opened (manifest and download open it once)."""
    if isinstance(name_or_ref, ArtifactRef):
        return name_or_ref
    return _ref_in(opened, *_chosen(opened, name_or_ref, version))


def _chosen(opened: Opened, name_or_ref: str | ArtifactRef, version: int | None) -> tuple[str, int]:
    """The name and version a look-up means, from the listing alone (no manifest read)."""
    if isinstance(name_or_ref, ArtifactRef):
        return name_or_ref.name, name_or_ref.version
    name, version = parse_ref(name_or_ref, version)
    versions = [found for _, found in opened.versions(name)]
    if not versions:
        raise LookupError(f"no artifact named {name!r} in {opened.where}")
    if version is not None and version not in versions:
        raise LookupError(f"{name!r} has no version {version} (latest is {versions[-1]})")
    return name, versions[-1] if version is None else version


def _ref_in(opened: Opened, name: str, version: int) -> ArtifactRef:
    ref = opened.ref(name, version)
    if ref is None:
        raise LookupError(f"{name!r} version {version} vanished from {opened.where}")
    return ref


def _readable_ref(opened: Opened, name: str, version: int) -> ArtifactRef | None:
    try:
        return opened.ref(name, version)
    except (IntegrityError, ManifestLimitError) as err:
        path = getattr(err, "path", None) or ""  # the errors name the object they read
        warnings.warn(UnreadableManifestWarning(
            f"left out {name}@{version}: its manifest {path or f'in {opened.where}'} cannot be read: {err}",
            name=name, version=version, path=path, reason=str(err), kind=type(err).__name__), stacklevel=3)
        return None


__all__ = ["BACKENDS", "Store", "backend_for"]

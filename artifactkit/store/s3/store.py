"""The face of a bucket store: what ``Store("s3://bucket/prefix")`` returns, with the same public API."""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor

from artifactkit.errors import IntegrityError, IntegrityFailure, ManifestLimitError, UnreadableManifestWarning
from artifactkit.store.gc import GcReport
from artifactkit.store.layout import ArtifactRef, parse_ref
from artifactkit.store.manifest import Manifest
from artifactkit.store.paths import LinkPolicy, check_artifact_name
from artifactkit.store.publish import capture_source
from artifactkit.store.restore_meta import Owners
from artifactkit.store.s3.download import download_manifest
from artifactkit.store.s3.layout import (
    fetch_version,
    listed_versions,
    manifest_key,
    parse_url,
    parse_version,
)
from artifactkit.store.s3.leases import LeasePolicy, publish_lease
from artifactkit.store.s3.objects import Bucket
from artifactkit.store.s3.publish import commit_version, upload_tree
from artifactkit.store.s3.verify_gc import gc_bucket, verify_bucket
from artifactkit.store.store import Store
from artifactkit.store.verify import VerifyReport


class S3Store(Store):
    """A store in an S3-compatible bucket; endpoint and credentials from the standard AWS chain."""

    def __init__(self, root: str | os.PathLike[str], *, policy: LeasePolicy | None = None) -> None:
        # No super().__init__: there is no local layout. Every method that would use one is overridden.
        self.root = os.fspath(root)
        bucket, prefix = parse_url(self.root)
        self.policy = policy or LeasePolicy()
        self.bucket = Bucket(bucket, prefix)

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def publish(self, src: str | os.PathLike[str], name: str, *, stat_cache: bool = False,
                workers: int | None = None, links: LinkPolicy = "as-is") -> ArtifactRef:
        """Upload the tree at ``src`` and claim the next version of ``name`` with one conditional PUT.
        ``links`` as the local store's. ``workers`` is accepted for its signature: an S3 publish reads in this
        process (its uploads are the cost, and run concurrently already)."""
        if stat_cache:
            raise NotImplementedError("the stat cache is for local stores; an S3 publish hashes every byte")
        check_artifact_name(name)
        tree = capture_source(src, links=links)
        self.bucket.check_bucket()  # a missing bucket or bad credentials fail before any read
        with publish_lease(self.bucket, self.policy) as lease:
            manifest = upload_tree(self.bucket, tree, name)
            return commit_version(self.bucket, manifest, lease)

    def list(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version (one LIST page per 1,000, one GET each).

        A manifest that cannot be read (its bytes do not match its pin, or it is over the size limit)
        is left out with an :class:`UnreadableManifestWarning` naming its key: one bad object written
        by anyone must not hide every other version. ``verify`` reports it as corrupt or unreadable.
        """
        with ThreadPoolExecutor(8, thread_name_prefix="artifactkit-ls") as pool:
            found = list(pool.map(lambda nv: self._readable_ref(*nv), listed_versions(self.bucket)))
        return sorted(ref for ref in found if ref is not None)

    def _readable_ref(self, name: str, version: int) -> ArtifactRef | None:
        try:
            found = fetch_version(self.bucket, name, version)
        except (IntegrityError, ManifestLimitError) as err:
            warnings.warn(UnreadableManifestWarning(
                f"left out {name}@{version}: its manifest {self.bucket.url(manifest_key(name, version))} cannot be "
                f"read: {err}"), stacklevel=2)
            return None
        return None if found is None else found[0]

    def resolve(self, name_or_ref: str | ArtifactRef, version: int | None = None) -> ArtifactRef:
        if isinstance(name_or_ref, ArtifactRef):
            return name_or_ref
        name, version = parse_ref(name_or_ref, version)
        versions = [v for _, v in listed_versions(self.bucket, name)]
        if not versions:
            raise LookupError(f"no artifact named {name!r} in {self.root}")
        if version is not None and version not in versions:
            raise LookupError(f"{name!r} has no version {version} (latest is {versions[-1]})")
        found = fetch_version(self.bucket, name, versions[-1] if version is None else version)
        if found is None:
            raise LookupError(f"{name!r} version {version} vanished from {self.root}")
        return found[0]

    def manifest(self, ref: str | ArtifactRef, version: int | None = None) -> Manifest:
        """The verified manifest of a version: its bytes must hash to the digest of ``ref``."""
        resolved = self.resolve(ref, version)
        found = fetch_version(self.bucket, resolved.name, resolved.version)
        where = self.bucket.url(manifest_key(resolved.name, resolved.version))
        if found is None:
            raise IntegrityError(f"manifest of {resolved} is missing from {self.root}", path=where,
                                 failed=IntegrityFailure.MISSING)
        return parse_version(resolved, found[1], where=where)

    def download(self, name_or_ref: str | ArtifactRef, dest: str | os.PathLike[str],
                 version: int | None = None, owners: Owners = "exact", workers: int | None = None) -> ArtifactRef:
        """Fetch and check every blob, then restore exactly as a local download does (``workers`` as
        there), or leave nothing."""
        ref = self.resolve(name_or_ref, version)
        download_manifest(self.bucket, self.manifest(ref), dest, owners=owners, workers=workers)
        return ref

    def verify(self) -> VerifyReport:
        """Read every manifest and hash every blob in the bucket without changing anything."""
        self.bucket.check_bucket()
        return verify_bucket(self.bucket, self.policy)

    def gc(self, *, dry_run: bool = False) -> GcReport:
        """Delete unreferenced blobs older than the grace period, under the gc lease (see docs/s3.md)."""
        if dry_run:
            raise NotImplementedError("gc --dry-run is for local stores; a bucket's gc deletes under its lease")
        self.bucket.check_bucket()
        return gc_bucket(self.bucket, self.policy)

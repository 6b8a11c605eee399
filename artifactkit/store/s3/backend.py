"""The bucket backend: a store under ``s3://bucket/prefix`` on any S3-compatible server.

The same transparent layout as a local store (:mod:`~artifactkit.store.s3.layout`). What differs from a
directory is all here: a version is claimed by ``PUT If-None-Match: *`` of its manifest key; the publish and
gc guards are leases made of objects (:mod:`~artifactkit.store.s3.leases`); the durability barrier is every
upload answered; gc never deletes a blob younger than the grace period (server clock), and abandoned
multipart uploads are the bucket's staging; the stat cache lives in the user's cache directory, one per store
URL (:func:`stat_cache_dir`, as a local store's). Endpoint and credentials come from the standard AWS chain.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Final

from artifactkit.engine.blobs import BlobsNeeded, BlobSource
from artifactkit.engine.content import CHUNK
from artifactkit.errors import IntegrityError, IntegrityFailure
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.limits import manifest_size_limit
from artifactkit.store.backend import Garbage, Guard
from artifactkit.store.manifest_file import check_object_size
from artifactkit.store.needed_blobs import NeededBlobs
from artifactkit.store.progress import Reporter
from artifactkit.store.s3.download import fetched_blobs
from artifactkit.store.s3.forget import BucketForgetter
from artifactkit.store.s3.layout import blob_key, fetch_version, listed_versions, manifest_key, parse_url
from artifactkit.store.s3.leases import (
    LeasePolicy,
    download_lease,
    forget_lease,
    gc_lease,
    live_publishers,
    publish_lease,
)
from artifactkit.store.s3.local_staging import local_staging
from artifactkit.store.s3.objects import Bucket, Upload
from artifactkit.store.s3.transfer import UPLOADS, BucketTxn
from artifactkit.store.stat_cache import StatCache
from artifactkit.store.stat_cache_file import bucket_site

#: Manifests read, or blobs hashed, at once by verify, gc and ls.
REQUESTS: Final = 8
#: Deletes between two checks of the gc lease.
DELETE_BATCH: Final = 100
def stat_cache_dir(url: str) -> str | None:
    """The directory of a bucket store's stat cache: the user's own cache, one directory per store URL (a
    bucket has no directory to keep it in; the cache says what this machine read, so it is this user's);
    ``None`` where the user has no cache directory."""
    return bucket_site(url).where


class S3Backend:
    """A store in an S3-compatible bucket; ``policy``: the lease protocol's times (every client of one
    bucket must use the same)."""

    def __init__(self, root: str, *, policy: LeasePolicy | None = None) -> None:
        self.root = root
        bucket, prefix = parse_url(root)
        self.policy = policy or LeasePolicy()
        self.bucket = Bucket(bucket, prefix)

    @property
    def retries(self) -> int:
        return self.bucket.retries

    def check_site(self) -> None:
        self.bucket.check_bucket()  # a missing bucket or bad credentials fail before any read

    @contextlib.contextmanager
    def open(self, *, create: bool = False, writes: bool = False) -> Iterator[BucketStore]:
        # Nothing to create or check up front: a bucket store is its keys, and every request names the bucket
        # (a missing one is BucketNotFoundError at the first); publish, verify and gc check it first.
        yield BucketStore(self.bucket, self.policy)

    def stat_cache(self, started_ns: int) -> StatCache:
        # Named by the normalised URL (s3://b/p and s3://b/p/ are one store), as BucketStore saves it.
        return StatCache.load(bucket_site(self.bucket.url()), started_ns)


class BucketStore:
    """A bucket store opened for one operation."""

    concurrency = REQUESTS
    #: A bucket's multipart uploads are its staging.
    staging_dir = "uploads"

    def __init__(self, bucket: Bucket, policy: LeasePolicy) -> None:
        self.bucket = bucket
        self.policy = policy
        self.where = bucket.url()
        self.default_grace_s = policy.grace_s
        self._bodies: dict[ArtifactRef, bytes] = {}  # what ref() read, for the manifest_bytes() that follows
        self._now: datetime | None = None  # the server's time, once per operation: what ages are measured from
        self._uploads: dict[str, Upload] = {}  # staging_garbage's listing, by the name it reported

    def versions(self, name: str | None = None) -> list[tuple[str, int]]:
        return listed_versions(self.bucket, name)

    def ref(self, name: str, version: int) -> ArtifactRef | None:
        # The key holds no digest (two publishers racing for one version must collide on one key): the
        # manifest is read, checked against the digest pinned in its metadata, and kept for manifest_bytes.
        found = fetch_version(self.bucket, name, version)
        if found is None:
            return None
        ref, body = found
        self._bodies[ref] = body
        return ref

    def manifest_bytes(self, ref: ArtifactRef, *, check_digest: bool = True) -> tuple[bytes, str]:
        where = self.bucket.url(manifest_key(ref.name, ref.version))
        body = self._bodies.pop(ref, None)
        if body is None:
            found = fetch_version(self.bucket, ref.name, ref.version)
            if found is None:
                raise IntegrityError(f"manifest of {ref} is missing from {self.where}", path=where,
                                     failed=IntegrityFailure.MISSING)
            body = found[1]
        if check_digest:  # as a local store's file name pins it
            check_manifest_digest(ref, body, where)
        return body, where

    def tree_object(self, digest: str) -> bytes:
        key = blob_key(digest)
        found = self.bucket.get_bounded(key, manifest_size_limit())
        if found is None:
            raise IntegrityError(f"tree object {digest} is missing from {self.where}", path=self.bucket.url(key),
                                 blob=digest, failed=IntegrityFailure.MISSING)
        data, _, length = found
        check_object_size(digest, length, self.bucket.url(key))
        return data

    def blob_digest(self, sha: str, sizes: Collection[int]) -> tuple[int, str | None]:
        # A HEAD first: a wrong size is found without a GET (the listing would give it too, but verify never holds
        # the listing of every blob).
        info = self.bucket.head(blob_key(sha))
        if info is None:
            raise IntegrityError(f"blob {sha} is missing from {self.where}", path=self.bucket.url(blob_key(sha)),
                                 blob=sha, failed=IntegrityFailure.MISSING)
        size = info.size
        if size not in sizes:
            return size, None
        actual, count = self.bucket.retrying(lambda: self._hash_blob(sha, size), blob_key(sha))
        if count > size:
            raise IntegrityError(f"blob {sha} in {self.where} is corrupt: the server sent more than its {size} "
                                 "bytes (reading stopped there)", path=self.bucket.url(blob_key(sha)), blob=sha,
                                 failed=IntegrityFailure.CORRUPT)
        return size, actual

    def _hash_blob(self, sha: str, size: int) -> tuple[str, int]:
        """One attempt at the sha256 and length of a blob (a body that breaks off is read again from its start)."""
        digest, count = hashlib.sha256(), 0
        with self.bucket.stream(blob_key(sha)) as body:
            # The listed size + 1 bytes at most: a server that sends more (its length a lie) is not read to its end.
            while count <= size and (chunk := body.read(min(CHUNK, size + 1 - count))):
                digest.update(chunk)
                count += len(chunk)
        return digest.hexdigest(), count

    @contextlib.contextmanager
    def quiescent(self) -> Iterator[Callable[[], bool]]:
        self.bucket.check_bucket()
        # No lock to take: publish leases live before and after the listing mean a publish may be in flight.
        busy = bool(live_publishers(self.bucket, self.policy.ttl_s, break_stale=False))
        yield lambda: not (busy or live_publishers(self.bucket, self.policy.ttl_s, break_stale=False))

    @contextlib.contextmanager
    def publishing(self) -> Iterator[tuple[Guard, BucketTxn]]:
        # The bucket was checked by check_site, before the scan.
        with (publish_lease(self.bucket, self.policy) as lease,
              local_staging() as (staging, stage_fd),
              ThreadPoolExecutor(UPLOADS, thread_name_prefix="artifactkit-upload") as pool):
            txn = BucketTxn(self.bucket, staging, stage_fd, pool)
            try:
                yield lease, txn
            except BaseException:
                txn.cancel()
                raise

    def save_stat_cache(self, cache: StatCache, ref: ArtifactRef, order: list[str]) -> None:
        cache.save(bucket_site(self.where), ref, order)  # a cache that cannot be written only loses the hint

    @contextlib.contextmanager
    def collecting(self) -> Iterator[Guard]:
        self.bucket.check_bucket()
        with gc_lease(self.bucket, self.policy) as lease:
            self._now = self.bucket.server_now()  # ages from the moment gc holds its lease, as the grace's cutoff
            yield lease

    def _age_s(self, when: datetime | None) -> float:
        if self._now is None:
            self._now = self.bucket.server_now()
        return 0.0 if when is None else max(0.0, (self._now - when).total_seconds())

    def staging_garbage(self, *, measure: bool = True) -> list[Garbage]:
        # A killed publisher's multipart parts; their bytes are not listed cheaply (a request per upload), so they
        # count none. Kept: remove_staging aborts exactly these, never what a second listing would find.
        self._uploads = {upload.key: upload for upload in self.bucket.uploads_before(datetime.max.replace(tzinfo=UTC))}
        return [Garbage(name, 0, self._age_s(upload.initiated)) for name, upload in self._uploads.items()]

    def blob_garbage(self, needed: NeededBlobs, *, measure: bool = True) -> list[Garbage]:
        # The server lists keys in order (UTF-8 binary order, as S3 specifies): merged with what is needed, held
        # page by page; a listing out of order is refused by the merge rather than trusted.
        listing = self.bucket.objects_under("blobs/")
        return [Garbage(info.key.removeprefix("blobs/"), info.size, self._age_s(info.last_modified))
                for info in needed.unneeded_in_order(listing, lambda info: info.key.removeprefix("blobs/"),
                                                     where=self.bucket.url("blobs/"))]

    def remove_staging(self, guard: Guard, staging: Sequence[Garbage]) -> None:
        for item in staging:
            guard.check()
            self.bucket.abort_upload(self._uploads[item.name])

    def remove_blobs(self, guard: Guard, blobs: Sequence[Garbage]) -> None:
        with ThreadPoolExecutor(REQUESTS, thread_name_prefix="artifactkit-gc") as pool:
            for start in range(0, len(blobs), DELETE_BATCH):
                guard.check()  # never delete after our lease may have lapsed
                list(pool.map(lambda item: self.bucket.delete(blob_key(item.name)), blobs[start:start + DELETE_BATCH]))
        guard.check()

    @contextlib.contextmanager
    def holding(self, name: str, version: int) -> Iterator[None]:
        with download_lease(self.bucket, self.policy, name, version):
            yield

    @contextlib.contextmanager
    def forgetting(self, names: Collection[str]) -> Iterator[BucketForgetter]:
        # locks/gc first: no publisher claims a number while versions go (and their markers are written); then
        # locks/forget, which downloads look at after writing their leases.
        self.bucket.check_bucket()
        with gc_lease(self.bucket, self.policy, "forget") as lease, forget_lease(self.bucket, self.policy) as mine:
            yield BucketForgetter(self.bucket, self.policy.ttl_s, (lease, mine))

    @contextlib.contextmanager
    def blob_source(self, needed: BlobsNeeded, dest: str, progress: Reporter) -> Iterator[BlobSource]:
        with fetched_blobs(self.bucket, needed.digests(), dest, progress) as source:
            yield source

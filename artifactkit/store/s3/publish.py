"""Publish into a bucket: the local capture and read, blobs up first, then one conditional PUT.

The source is captured by :func:`artifactkit.store.publish.capture_source` and every file read once
by :func:`artifactkit.store.content.read_source` exactly as for a local store (small files into
memory, large ones copied into a local staging dir while hashed). Blobs go up on a thread pool as
they are read (HEAD first: a blob already in the bucket costs one request and no bytes), with the
bytes in flight bounded. Only when every blob is up does one ``PUT If-None-Match: *`` of the
manifest claim the next version *and* make it visible; a 412 means another publisher took that
number, and the next one is tried. No visible version can be incomplete, and nothing is overwritten.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Final

from artifactkit.metadata.model import FileMeta
from artifactkit.store.layout import ArtifactRef
from artifactkit.store.manifest import Manifest, digest_of
from artifactkit.store.publish import fill_hardlinks, read_files, with_content
from artifactkit.store.s3.layout import blob_key, listed_versions, manifest_key
from artifactkit.store.s3.leases import Lease
from artifactkit.store.s3.objects import MULTIPART_THRESHOLD, Bucket
from artifactkit.store.scan import ScannedTree

#: Bytes of small files held in memory waiting for their upload, at most (plus one file being read).
IN_FLIGHT_LIMIT: Final = 64 << 20
WORKERS: Final = 8


def upload_blob(bucket: Bucket, sha: str, data: bytes | None, staged: str | None) -> bool:
    """Put one blob unless the bucket has it at its size; True if bytes were sent. The staged copy is removed.

    An object of another length under the name (truncated, or planted by another writer of the
    bucket) is replaced with our bytes, which are in hand: trusting it would make a version that
    says "published" and can never be downloaded. One of the same length is trusted on its name, as
    before (checking its content would cost a GET of every blob); ``verify`` hashes it.
    """
    try:
        stored = bucket.head(blob_key(sha))
        size = len(data) if data is not None else os.path.getsize(staged) if staged is not None else 0
        if stored is not None and stored.size == size:
            return False
        if data is not None:
            bucket.put(blob_key(sha), data, sha256=sha)  # the server checks the bytes hash to the name
        elif staged is not None and os.path.getsize(staged) < MULTIPART_THRESHOLD:
            with open(staged, "rb") as body:
                bucket.put(blob_key(sha), body, sha256=sha)
        elif staged is not None:
            bucket.upload_file(blob_key(sha), staged)
        return True
    finally:
        if staged is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)


def upload_tree(bucket: Bucket, tree: ScannedTree, name: str, *, workers: int = WORKERS) -> Manifest:
    """Read every file of ``tree`` once and put its blob; the manifest of what was read."""
    entries: list[FileMeta] = []
    read: dict[str, FileMeta] = {}  # path -> entry with content facts, for the other names of a hard link
    all_noatime = tree.listed_noatime
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="artifactkit-s3-publish-") as staging, \
            ThreadPoolExecutor(workers, thread_name_prefix="artifactkit-upload") as pool:
        stage_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        pending: dict[Future[bool], int] = {}
        try:
            for entry, found, stage_name in read_files(tree, stage_fd):
                if found is None:
                    entries.append(entry)
                    continue
                sha, data = found.sha256, found.data
                all_noatime = all_noatime and found.noatime
                staged = None if data is not None else os.path.join(staging, stage_name)
                if sha in seen:
                    if staged is not None:
                        os.unlink(staged)
                else:
                    seen.add(sha)
                    pending[pool.submit(upload_blob, bucket, sha, data, staged)] = len(data or b"")
                    _drain(pending, IN_FLIGHT_LIMIT)
                read[entry.path] = with_content(entry, sha, found.flags, found.extents)
                entries.append(read[entry.path])
            _drain(pending, 0)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
        finally:
            os.close(stage_fd)
    return Manifest(name=name, entries=tuple(fill_hardlinks(entries, read)), source_read_noatime=all_noatime)


def _drain(pending: dict[Future[bool], int], limit: int) -> None:
    """Wait for uploads until at most ``limit`` bytes (and 64 uploads) are in flight; re-raise a failure."""
    while pending and (sum(pending.values()) > limit or len(pending) > 64 or limit == 0):
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            del pending[future]
            future.result()


def commit_version(bucket: Bucket, manifest: Manifest, lease: Lease) -> ArtifactRef:
    """Claim the next free version of the manifest's name with one conditional PUT of its bytes."""
    body = manifest.to_bytes()
    digest = digest_of(body)
    # "writer" tells our own write from another's if botocore retried a PUT that had in fact landed.
    metadata = {"sha256": digest, "writer": secrets.token_hex(8)}
    version = max((v for _, v in listed_versions(bucket, manifest.name)), default=0) + 1
    while True:
        lease.check()  # a publisher whose lease lapsed may have lost blobs to gc: it must not commit
        if bucket.create(manifest_key(manifest.name, version), body, metadata=metadata) is not None:
            return ArtifactRef(manifest.name, version, digest)
        # Taken: others may have taken several meanwhile, so look again rather than count up one by one.
        latest = max((v for _, v in listed_versions(bucket, manifest.name)), default=0)
        version = max(version + 1, latest + 1)

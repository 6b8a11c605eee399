"""A publish into a bucket: blobs go up as the executor hands over each batch, the manifest last.

The executor reads every file once exactly as for a local store, with small files' new bytes kept in memory
(``in_memory``) and larger ones copied into a local staging dir while hashed; each batch's new blobs are put
on a thread pool while the next batch is read (hashing overlapped with transfer), with the bytes in flight
bounded. The flush waits for every upload; only then does the claim — one ``PUT If-None-Match: *`` of the
manifest — take the next version *and* make it visible; a 412 means another publisher took that number.
No visible version can be incomplete, and nothing is overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Final

from artifactkit.errors import RemoteStoreError
from artifactkit.store.backend import Mover
from artifactkit.store.blob_check import Held, StagedCopy
from artifactkit.store.content import CHUNK
from artifactkit.store.layout import HasBlob
from artifactkit.store.s3.layout import blob_key, listed_versions, manifest_key
from artifactkit.store.s3.objects import MULTIPART_THRESHOLD, Bucket
from artifactkit.store.stage import Staged

#: Bytes of small files held in memory waiting for their upload, at most (plus one batch being read).
IN_FLIGHT_LIMIT: Final = 64 << 20
#: Uploads at once: small objects are latency-bound, so many overlap (the client's connection pool matches).
UPLOADS: Final = 16
#: A listing of ``blobs/`` answers 1,000 names a request; a HEAD one. The listing is taken while it costs
#: at most a quarter of the HEADs it replaces, i.e. up to this many names per lookup.
NAMES_PER_LOOKUP: Final = 250


class BucketTxn:
    """One publish into ``bucket``: staging in a private local directory, uploads on ``pool``."""

    blobs_fd = -1  # no blobs directory: the executor stages with the reference's functions, in memory
    in_memory = True

    def __init__(self, bucket: Bucket, stage_path: str, stage_fd: int, pool: ThreadPoolExecutor) -> None:
        self.bucket = bucket
        self.stage_path = stage_path
        self.stage_fd = stage_fd
        self._pool = pool
        self._pending: dict[Future[None], int] = {}
        self._sent: set[str] = set()
        # "writer" tells our own write from another's if the client retried a PUT that had in fact landed.
        self._writer = secrets.token_hex(8)

    def blob_lookup(self, lookups: int) -> HasBlob:
        """One listing of ``blobs/`` where it costs fewer requests than a GET per file, else none: every object
        is checked by content anyway (:class:`BucketBlobs`), and its GET says whether it is there."""
        sizes: dict[str, int] = {}
        for count, info in enumerate(self.bucket.objects_under("blobs/")):
            if count >= max(lookups, 1) * NAMES_PER_LOOKUP:
                return BucketBlobs(self, None)
            sizes[info.key.removeprefix("blobs/")] = info.size
        return BucketBlobs(self, sizes)

    def submit(self, check: Callable[[], None], in_flight: int) -> None:
        """Run ``check`` on the upload pool, its ``in_flight`` bytes held until it ends (bounded as uploads are)."""
        self._pending[self._pool.submit(check)] = in_flight
        self._drain(IN_FLIGHT_LIMIT)

    def add(self, staged: Sequence[Staged]) -> None:
        for found in staged:
            if not found.staged:
                continue
            path = None if found.data is not None else os.path.join(self.stage_path, found.path())
            if found.sha256 in self._sent:
                if path is not None:
                    os.unlink(path)
                continue
            self._sent.add(found.sha256)
            self._pending[self._pool.submit(upload_blob, self.bucket, found.sha256, found.data, path)] = \
                len(found.data or b"")
            self._drain(IN_FLIGHT_LIMIT)

    def _drain(self, limit: int) -> None:
        """Wait for uploads until at most ``limit`` bytes (and 4 x UPLOADS uploads) are in flight; re-raise a
        failure."""
        pending = self._pending
        while pending and (sum(pending.values()) > limit or len(pending) > 4 * UPLOADS or limit == 0):
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                del pending[future]
                future.result()

    def seal(self, move: Mover) -> None:
        """Nothing to move: every upload lands under its final key."""

    def flush(self, body: bytes) -> None:
        # A PUT that answered is stored for good: the barrier is every upload answered.
        self._drain(0)

    def cancel(self) -> None:
        """Drop the uploads not started yet and wait for the rest (a failed publish)."""
        for future in self._pending:
            future.cancel()
        wait(self._pending)
        self._pending.clear()

    def latest(self, name: str) -> int:
        return max((version for _, version in listed_versions(self.bucket, name)), default=0)

    def claim(self, name: str, version: int, body: bytes, digest: str) -> bool:
        metadata = {"sha256": digest, "writer": self._writer}
        return self.bucket.create(manifest_key(name, version), body, metadata=metadata) is not None


class BucketBlobs:
    """Whether the bucket holds a blob (:class:`~artifactkit.store.layout.HasBlob`), checked by content: an
    object under the name (planted by another writer of the bucket, or left truncated) is trusted only once a GET
    of it reads as the bytes the publish has in hand, or hashes to its name where it has none (a stat cache's
    hit). With bytes in hand the answer is "stored" at once and the GET runs on the upload pool beside the reads;
    an object that is not the content is then PUT again from those bytes, before the flush ends, so no version is
    claimed while one of its blobs is damaged. ``sizes``: the listing (``None``: none taken, a GET says)."""

    def __init__(self, txn: BucketTxn, sizes: dict[str, int] | None) -> None:
        self._txn, self._sizes = txn, sizes
        self.repaired: set[str] = set()
        self._verdicts: dict[str, bool | None] = {}  # settled here: holds, damaged, absent
        self._checking: set[str] = set()  # checked on the pool against bytes in hand, repaired there if damaged
        self._lock = threading.Lock()

    def __call__(self, sha: str, size: int | None, held: Held = None, /) -> bool:
        if sha in self._checking:
            return True
        if self._sizes is not None and sha not in self._sizes:
            return False
        if sha not in self._verdicts and self._sizes is not None and size is not None and self._sizes[sha] != size:
            self._verdicts[sha] = False  # another length: no GET needed to know
        if sha in self._verdicts:
            verdict = self._verdicts[sha]
            if verdict is False and held is not None:
                with self._lock:
                    self.repaired.add(sha)
            return bool(verdict)
        if held is None:  # nothing in hand to store again: the answer is needed now
            verdict = self._verdicts[sha] = object_holds(self._txn.bucket, sha, size, None)
            return bool(verdict)
        data, kept = (held, None) if isinstance(held, bytes) else (None, _kept(held, self._txn.stage_path))
        self._checking.add(sha)
        self._txn.submit(lambda: self._check(sha, size, data, kept), len(data or b""))
        return True

    def _check(self, sha: str, size: int | None, data: bytes | None, kept: str | None) -> None:
        """On the pool: the object GET and compared; PUT again from the bytes in hand unless it holds them."""
        try:
            verdict = object_holds(self._txn.bucket, sha, size, data)
            if verdict is not True:
                upload_blob(self._txn.bucket, sha, data, kept)  # removes the kept copy
                kept = None
                if verdict is False:
                    with self._lock:
                        self.repaired.add(sha)
        finally:
            if kept is not None:
                os.unlink(kept)


def _kept(copy: StagedCopy, stage_path: str) -> str:
    """A second name of a staged copy the publish would drop (its content is stored): kept for its check."""
    os.link(copy.name, f"{copy.name}.checked", src_dir_fd=copy.dir_fd, dst_dir_fd=copy.dir_fd)
    return os.path.join(stage_path, f"{copy.name}.checked")


def object_holds(bucket: Bucket, sha: str, size: int | None, data: bytes | None) -> bool | None:
    """Whether the object ``blobs/<sha>`` reads as ``data`` or, without it, hashes to ``sha`` (of ``size`` bytes
    where known); ``None`` if there is none. At most ``size + 1`` bytes are read of an object longer than told."""
    if data is not None:
        size = len(data)
    digest, read = hashlib.sha256(), 0
    try:
        with bucket.stream(blob_key(sha)) as body:
            while chunk := body.read(CHUNK if size is None else min(CHUNK, size + 1 - read)):
                if data is not None and chunk != data[read:read + len(chunk)]:
                    return False
                digest.update(chunk)
                read += len(chunk)
    except RemoteStoreError as err:
        if getattr(err, "code", None) == "NoSuchKey":  # the error carries the server's code as context
            return None
        raise
    return (size is None or read == size) and (data is not None or digest.hexdigest() == sha)


def upload_blob(bucket: Bucket, sha: str, data: bytes | None, staged: str | None) -> None:
    """Put one blob (the server checks the bytes hash to the name); a staged copy is removed after."""
    try:
        if data is not None:
            bucket.put(blob_key(sha), data, sha256=sha)
        elif staged is not None and os.path.getsize(staged) < MULTIPART_THRESHOLD:
            with open(staged, "rb") as body:
                bucket.put(blob_key(sha), body, sha256=sha)
        elif staged is not None:
            bucket.upload_file(blob_key(sha), staged)
    finally:
        if staged is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)

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
import os
import secrets
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Final

from artifactkit.engine.blob_check import HasBlob
from artifactkit.engine.values import ReadBatch
from artifactkit.errors import RemoteUnavailableError
from artifactkit.store.backend import Mover
from artifactkit.store.s3.checks import BucketBlobs
from artifactkit.store.s3.layout import blob_key, highest_taken, manifest_key
from artifactkit.store.s3.objects import MULTIPART_THRESHOLD, Bucket, ObjectInfo

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
        """One listing of ``blobs/`` (each object's length and ETag) where it costs fewer requests than a HEAD per
        file, else none; every object is checked by content (:class:`~artifactkit.store.s3.checks.BucketBlobs`)."""
        listed: dict[str, ObjectInfo] = {}
        for count, info in enumerate(self.bucket.objects_under("blobs/")):
            if count >= max(lookups, 1) * NAMES_PER_LOOKUP:
                return BucketBlobs(self, None)
            listed[info.key.removeprefix("blobs/")] = info
        return BucketBlobs(self, listed)

    def put_again(self, sha: str, data: bytes | None, staged: str | None) -> None:
        """A blob whose object was not its content, put from the bytes in hand (checks.BucketBlobs)."""
        upload_blob(self.bucket, sha, data, staged)

    def submit(self, check: Callable[[], None], in_flight: int) -> None:
        """Run ``check`` on the upload pool, its ``in_flight`` bytes held until it ends (bounded as uploads are)."""
        self._pending[self._pool.submit(check)] = in_flight
        self._drain(IN_FLIGHT_LIMIT)

    def add(self, staged: ReadBatch) -> None:
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

    def spill(self) -> None:
        """Nothing held: each batch's uploads were sent as it was added."""

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
        return highest_taken(self.bucket, name)  # a forgotten newest version's number is never claimed again

    def claim(self, name: str, version: int, body: bytes, digest: str) -> bool:
        metadata = {"sha256": digest, "writer": self._writer}
        try:
            return self.bucket.create(manifest_key(name, version), body, metadata=metadata) is not None
        except RemoteUnavailableError as err:
            # The one request whose lost answer may hide a success: say what a look will show.
            raise type(err)(f"{err.message}; {name}@{version} may be visible all the same, and complete: its manifest "
                            "may have landed before the endpoint stopped answering, and every blob it names was "
                            "stored first", **err.context) from err


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

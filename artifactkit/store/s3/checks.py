"""A bucket's blobs, checked by content before a publish deduplicates against them (issue 48; the directory's
counterpart is :mod:`~artifactkit.engine.blob_check`).

An object under a blob's key is a claim any writer of the bucket can make. It is trusted only once its content
is shown to be the bytes the publish has in hand, from what the bucket says of it first:

- **The listing's ETag.** S3 (and SeaweedFS, measured) gives an object written in one PUT the MD5 of its bytes
  as its ETag, in the listing the publish takes anyway: an ETag equal to the MD5 of the bytes in hand is the
  content, no request needed. MD5 is broken for collisions, so this trusts that nobody crafted a colliding pair
  *and* put one of them in your tree: such a writer gains a version that does not download (every download
  still checks sha256), which any writer of the bucket can cause anyway by deleting the object after the
  publish. Checking every object by GET instead (commit 6b69aaa) cost 8.9x an unchanged re-publish of 10,000
  files (18.3 s against 2.1 s on SeaweedFS here, 10,000 GETs); with the ETag, 0.97x (``diagnostics/results/
  bench-revisions-issue48-republish-many-s3.json``).
- **A GET**, where the ETag does not match (or is no MD5: a multipart object's, an encrypting server's), where
  no listing was taken, or where the publish has nothing in hand (a stat cache's hit: then hashed, one GET at
  a time). With bytes in hand the answer is "stored" at once and the GET runs on the upload pool beside the
  reads; an object that is not the content is PUT again from those bytes before the flush ends, so no version
  is claimed while one of its blobs is damaged.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import Protocol

from artifactkit.engine.blob_check import Held, StagedCopy
from artifactkit.engine.content import CHUNK
from artifactkit.errors import RemoteStoreError
from artifactkit.store.s3.layout import blob_key
from artifactkit.store.s3.objects import Bucket, ObjectInfo


class Uploads(Protocol):
    """What the checks need of the bucket's publish transaction (:class:`~artifactkit.store.s3.transfer.BucketTxn`)."""

    bucket: Bucket
    stage_path: str

    def submit(self, check: Callable[[], None], in_flight: int) -> None:
        """Run ``check`` on the upload pool, its ``in_flight`` bytes held until it ends."""

    def put_again(self, sha: str, data: bytes | None, staged: str | None) -> None:
        """Put the blob from the bytes in hand (a staged copy is removed after)."""


class BucketBlobs:
    """Whether the bucket holds a blob (:class:`~artifactkit.engine.blob_check.HasBlob`), checked by content as this
    module says. ``listed``: the listing's objects by digest (``None``: none taken)."""

    def __init__(self, txn: Uploads, listed: dict[str, ObjectInfo] | None) -> None:
        self._txn, self._listed = txn, listed
        self.repaired: set[str] = set()
        self._verdicts: dict[str, bool | None] = {}  # settled here: holds, damaged, absent
        self._checking: set[str] = set()  # checked on the pool against bytes in hand, repaired there if damaged
        self._lock = threading.Lock()

    def __call__(self, sha: str, size: int | None, held: Held = None, /) -> bool:
        if sha in self._checking:
            return True
        info = None if self._listed is None else self._listed.get(sha)
        if self._listed is not None and info is None:
            return False
        if sha not in self._verdicts and info is not None:
            if size is not None and info.size != size:
                self._verdicts[sha] = False  # another length: nothing to read to know
            elif isinstance(held, bytes) and _md5_etag(info.etag) == _md5(held):
                self._verdicts[sha] = True  # the bucket's own MD5 of the object is that of these bytes
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
        etag = None if info is None else info.etag
        self._txn.submit(lambda: self._check(sha, size, data, kept, etag), len(data or b""))
        return True

    def _check(self, sha: str, size: int | None, data: bytes | None, kept: str | None, etag: str | None) -> None:
        """On the pool: a staged copy's MD5 against the ETag, else the object GET and compared; PUT again from the
        bytes in hand unless it holds them."""
        try:
            verdict = True if kept is not None and _md5_etag(etag) == _md5_of(kept) else \
                object_holds(self._txn.bucket, sha, size, data)
            if verdict is not True:
                self._txn.put_again(sha, data, kept)  # removes the kept copy
                kept = None
                if verdict is False:
                    with self._lock:
                        self.repaired.add(sha)
        finally:
            if kept is not None:
                os.unlink(kept)


def _md5_etag(etag: str | None) -> str | None:
    """The MD5 an ETag is (a one-PUT object's, quoted), or ``None`` (a multipart object's ``md5-N``, none)."""
    bare = (etag or "").strip('"').lower()
    return bare if len(bare) == 32 and all(c in "0123456789abcdef" for c in bare) else None


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _md5_of(path: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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

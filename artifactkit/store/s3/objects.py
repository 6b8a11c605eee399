"""The one module that talks to the object store: typed calls on one bucket, client errors mapped to ours.

The client is obstore (Rust ``object_store``; ``docs/s3.md`` says why: 2,000 PUTs of 1 KiB cost it 1.2-1.5 s of
client CPU, boto3 6.4-7.0 s); :mod:`~artifactkit.store.s3.connect` configures it. Imported on first use:
``import artifactkit`` works without the ``s3`` extra and *using* an ``s3://`` store names the extra.

Facts it rests on (measured against SeaweedFS 4.48 and obstore 0.12.1): a PUT with ``If-None-Match: *``
answers 412 on an existing key (AWS may answer a racing one with 409; both mean "not created"); obstore
sends ``x-amz-checksum-sha256`` of the bytes it sends and the server refuses a body that does not hash to
it (``BadDigest``); HEAD on a missing key says 404 whether the key or the bucket is missing (no body, no
code), so one HEAD of the bucket tells them apart; obstore has no conditional DELETE, no HEAD of a bucket
and shows no response headers, so those three go as presigned URLs; it has no listing of multipart
uploads, so gc's abort of stale ones uses boto3; its listing follows the server's tokens where nothing can
stop it, so a listing is requested page by page, signed here (:mod:`~artifactkit.store.s3.listing`).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Any, Final, TypeVar

import attrs

from artifactkit.errors import RemoteStoreError
from artifactkit.store.s3.bodies import MIB, Body, error_code, read_at_most
from artifactkit.store.s3.connect import Connection, Limits, NoCredentialsError, import_extra
from artifactkit.store.s3.failures import NOT_CREATED, code_status, raise_as, raise_for, refused, translate
from artifactkit.store.s3.listing import PAGE_KEYS, ListingBounds, ListingGuard, parse_objects, timed
from artifactkit.store.s3.retries import Retrier, is_transient, retry_budget_s

#: Blobs above this go up in parts (and come down in ranges) of ``PART_SIZE``.
MULTIPART_THRESHOLD: Final = 64 * MIB
PART_SIZE: Final = 16 * MIB

#: Attributes obstore returns that are not user metadata (``x-amz-meta-*``).
_STANDARD: Final = frozenset({"Content-Disposition", "Content-Encoding", "Content-Language", "Content-Type",
                              "Cache-Control", "Storage-Class"})

T = TypeVar("T")


@attrs.frozen
class ObjectInfo:
    """One listed or HEADed object: key relative to the store prefix, size, ETag, server time of writing."""

    key: str
    size: int
    etag: str
    last_modified: datetime


@attrs.frozen
class Upload:
    """One multipart upload never completed: its key relative to the store prefix and the server's id for it."""

    key: str
    upload_id: str
    #: When the server says it began (what gc's grace measures); ``None`` where it was not listed.
    initiated: datetime | None = None


class Bucket:
    """The objects of one bucket under one key prefix, with errors mapped to artifactkit's."""

    def __init__(self, bucket: str, prefix: str, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 30.0,
                 retry_s: float | None = None, max_connections: int = 32, listing: ListingBounds | None = None) -> None:
        self._obstore: Any = import_extra("obstore")
        self.bucket = bucket
        self.prefix = prefix
        #: The bounds every listing of this bucket stops at (:mod:`~artifactkit.store.s3.listing`).
        self.listing = listing or ListingBounds()
        #: Sends a failed request again (``retry_s``: its budget; None: ``ARTIFACTKIT_S3_RETRY_S``; 0: never).
        self.retrier = Retrier(retry_budget_s() if retry_s is None else retry_s)
        try:
            self._conn = Connection(bucket, Limits(connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
                                                   max_connections=max_connections))
        except NoCredentialsError as err:
            raise_as(self.translate(err), err)
        self.store: Any = self._conn.store
        #: Requests sent, by S3 operation name (what the tests and ``benches/s3.py`` count).
        self.requests: collections.Counter[str] = collections.Counter()
        self._count_lock = threading.Lock()
        # Set once the bucket answered (a HEAD of it, or any object's PUT, GET or HEAD that succeeded): a later
        # 404 on a HEAD then means a missing key. A bucket deleted after that still shows up, as NoSuchBucket
        # on the next PUT or GET (measured: re-checking on every miss cost one extra request per new blob,
        # 10,002 on a 10,000-file first publish; a download's HEAD of locks/forget cost one HeadBucket each).
        self._bucket_seen = False

    @property
    def retries(self) -> int:
        """Requests this bucket's client sent again after a transient failure, so far (all threads)."""
        return self.retrier.count

    def retrying(self, request: Callable[[], T], key: str | None = None, *,
                 transient: Callable[[BaseException], bool] = is_transient, budget_s: float | None = None,
                 stop: threading.Event | None = None) -> T:
        """``request()`` sent again while it fails transiently, within the retry budget
        (:mod:`~artifactkit.store.s3.retries`); errors name ``key``."""
        return self.retrier.call(request, lambda err: self.translate(err, key), transient=transient,
                                 budget_s=budget_s, stop=stop)

    @property
    def endpoint(self) -> str:
        """The server's URL, as the AWS environment resolved it (``AWS_ENDPOINT_URL``, a profile, or AWS)."""
        return self._conn.endpoint

    def url(self, key: str | None = None) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key or ''}"

    def _count(self, operation: str, n: int = 1) -> None:
        with self._count_lock:  # Counter's += is a read and a write: threads would lose counts
            self.requests[operation] += n

    def translate(self, err: BaseException, key: str | None = None) -> RemoteStoreError:
        """A client exception (obstore's, a presigned request's, botocore's) as one of ours, naming the object
        and the server's code."""
        # No endpoint yet when the connection itself failed (credentials): translate names it only for TLS.
        endpoint = self._conn.endpoint if hasattr(self, "_conn") else "the endpoint"
        return translate(err, where=self.url(key), bucket=self.bucket, endpoint=endpoint)

    @contextlib.contextmanager
    def _mapped(self, key: str | None = None) -> Iterator[None]:
        """Only around client calls: an OSError of the caller's own (ENOSPC) must stay what it is."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
            raise_as(self.translate(err, key), err)

    def _presigned(self, method: str, key: str, operation: str, **headers: str) -> tuple[int, Any]:
        self._count(operation)
        with self._mapped(key or None):
            return self.retrying(lambda: self._conn.presigned(method, self.prefix + key if key else "", headers),
                                 key or None)

    def check_bucket(self) -> None:
        """Raise :class:`BucketNotFoundError` (or an auth/unreachable error) unless the bucket answers."""
        status, _ = self._presigned("HEAD", "", "HeadBucket")
        self._raise_for(status, None)
        self._bucket_seen = True

    def _raise_for(self, status: int, key: str | None) -> None:
        raise_for(status, where=self.url(key), bucket=self.bucket, of_bucket=key is None)

    # -- writes
    def _put(self, key: str, data: bytes | memoryview, metadata: dict[str, str] | None, mode: Any = None) -> str:
        def attempt() -> Any:
            self._count("PutObject")
            return self._obstore.put(self.store, self.prefix + key, data, attributes=metadata or None, mode=mode,
                                     use_multipart=False)
        etag = str(self.retrying(attempt, key)["e_tag"])
        self._bucket_seen = True
        return etag

    def put(self, key: str, body: bytes | IO[bytes], *, sha256: str | None = None,
            metadata: dict[str, str] | None = None) -> str:
        """Unconditional PUT; with ``sha256`` a body that does not hash to it is refused (``BadDigest``).

        obstore cannot send a given checksum, only the one of the bytes it sends: so the bytes are hashed
        here against ``sha256`` first, and the server then checks what arrived against obstore's header."""
        data = body if isinstance(body, bytes) else body.read()
        if sha256 is not None and (actual := hashlib.sha256(data).hexdigest()) != sha256:
            where = self.url(key)
            raise RemoteStoreError(f"{where}: BadDigest: the body hashes to {actual}, not to the sha256 given "
                                   f"({sha256}); not sent", url=where, code="BadDigest")
        with self._mapped(key):
            return self._put(key, data, metadata)

    def create(self, key: str, body: bytes, *, metadata: dict[str, str] | None = None) -> str | None:
        """Create ``key`` only if absent (``If-None-Match: *``): its ETag, or None if it already existed.

        ``body`` or ``metadata`` must hold a nonce of the caller's: a PUT whose answer was lost is sent again
        (:mod:`~artifactkit.store.s3.retries`), and its first attempt may have landed, so on every 412 the stored
        object is read back — equal body *and* metadata mean the write that landed was ours (equal bytes alone
        are not proof: two publishers of one tree write equal manifests)."""
        try:
            return self._put(key, body, metadata, mode="create")
        except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
            if not refused(err, NOT_CREATED):
                raise_as(self.translate(err, key), err)
        stored = self._read_back(key, len(body))
        if stored is not None and stored[:2] == (body, metadata or {}):
            return stored[3]
        return None

    def replace(self, key: str, body: bytes, etag: str) -> str | None:
        """Compare-and-swap (``If-Match``): the new ETag, or None if the object changed or vanished.

        ``body`` must be unique to this write (a lease's nonce and counter): on a refusal the object is read
        back, and ``body`` there means a first attempt landed whose answer was lost, so the swap was ours."""
        try:
            return self._put(key, body, None, mode={"e_tag": etag})
        except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
            if not refused(err, (*NOT_CREATED, 404)) or code_status(err)[0] == "NoSuchBucket":
                raise_as(self.translate(err, key), err)
        stored = self._read_back(key, len(body))
        return stored[3] if stored is not None and stored[0] == body else None

    def upload_file(self, key: str, path: str) -> None:
        """Upload a large file in ``PART_SIZE`` parts, 8 at once (unconditional; each part checksummed)."""
        parts = max(-(-Path(path).stat().st_size // PART_SIZE), 1)

        def attempt() -> None:  # all of it again: a part's failure fails obstore's upload (an abandoned one: gc's)
            for operation, n in ("CreateMultipartUpload", 1), ("UploadPart", parts), ("CompleteMultipartUpload", 1):
                self._count(operation, n)
            self._obstore.put(self.store, self.prefix + key, Path(path), use_multipart=True, chunk_size=PART_SIZE,
                              max_concurrency=8)
        with self._mapped(key):
            self.retrying(attempt, key)

    # -- reads
    def _get(self, key: str, **options: Any) -> Any:
        def attempt() -> Any:
            self._count("GetObject")
            return self._obstore.get(self.store, self.prefix + key, options=options or None)
        result = self.retrying(attempt, key)
        self._bucket_seen = True
        return result

    @contextlib.contextmanager
    def stream(self, key: str, *, first: int | None = None, last: int | None = None) -> Iterator[Body]:
        """The object's body as a file-like ``read(n)`` (``first``..``last`` inclusive for a byte range)."""
        options = {} if first is None else {"range": {"offset": first} if last is None else (first, last + 1)}
        with self._mapped(key):
            body = Body(self._get(key, **options), lambda err: self.translate(err, key))
        try:
            yield body
        finally:
            body.close()

    def get_bytes(self, key: str) -> bytes:
        with self._mapped(key):
            return self.retrying(lambda: bytes(self._get(key).bytes()), key)

    def get_bounded(self, key: str, max_bytes: int) -> tuple[bytes, dict[str, str], int] | None:
        """(body, user metadata, Content-Length) of ``key``, or None if absent; at most ``max_bytes + 1``
        bytes of the body are read, none at all when the server says it is longer than ``max_bytes``."""
        found = self._read_back(key, max_bytes)
        return None if found is None else found[:3]

    def _read_back(self, key: str, max_bytes: int) -> tuple[bytes, dict[str, str], int, str] | None:
        """:meth:`get_bounded` and the object's ETag; a body that broke off is read again from its start."""
        return self.retrying(lambda: self._read_back_once(key, max_bytes), key)

    def _read_back_once(self, key: str, max_bytes: int) -> tuple[bytes, dict[str, str], int, str] | None:
        try:
            result = self._get(key)
        except FileNotFoundError as err:
            if code_status(err)[0] == "NoSuchBucket":
                raise_as(self.translate(err, key), err)
            return None
        except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
            raise_as(self.translate(err, key), err)
        meta = result.meta
        length = int(meta["size"])
        metadata = {k: v for k, v in result.attributes.items() if k not in _STANDARD}
        body = Body(result, lambda err: self.translate(err, key))
        try:
            # The length the server gave + 1 (one byte more proves it lied), in chunks: memory grows with
            # what arrives, never with what a header claims.
            data = b"" if length > max_bytes else read_at_most(body, length + 1)
        finally:
            body.close()
        return data, metadata, max(length, len(data)), str(meta["e_tag"])

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and time of an object, or None if absent (a missing bucket is an error)."""
        self._count("HeadObject")
        try:
            meta = self.retrying(lambda: self._obstore.head(self.store, self.prefix + key), key)
        except FileNotFoundError:
            if not self._bucket_seen:
                self.check_bucket()
            return None
        except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
            raise_as(self.translate(err, key), err)
        self._bucket_seen = True
        return ObjectInfo(key, int(meta["size"]), str(meta["e_tag"]), meta["last_modified"])

    def objects_under(self, under: str, *, max_keys: int | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``under``, in the server's key order, a page of 1,000 per request;
        a listing that crosses a bound of :mod:`~artifactkit.store.s3.listing` (``max_keys``: a smaller one of
        the caller's) is :class:`ListingLimitError`."""
        full, skip, where = self.prefix + under, len(self.prefix), self.url(under)
        guard = ListingGuard(where, self.listing if max_keys is None else attrs.evolve(self.listing,
                                                                                       max_keys=max_keys))
        params = {"list-type": "2", "prefix": full, "max-keys": str(PAGE_KEYS)}
        while True:
            self._count("ListObjectsV2")
            try:
                # Sent again while the listing's own time bound lasts (each attempt is charged to it).
                status, body = self.retrying(lambda: self._list_page(params, guard), under,
                                             transient=lambda err: is_transient(err) and guard.time_left() > 0)
            except Exception as err:  # noqa: BLE001 - re-raised, translated, by raise_as
                raise_as(self.translate(err, under), err)
            if status != 200:
                raise_for(status, where=where, bucket=self.bucket, of_bucket=False, code=error_code(body))
            if len(body) > self.listing.page_bytes:
                raise RemoteStoreError(f"{where}: a page of the listing is over {self.listing.page_bytes:,} bytes "
                                       f"(a page of {PAGE_KEYS:,} keys holds at most about 6 MB)", url=where,
                                       code="ListingPageTooLarge")
            found, _, token = parse_objects(body, where)
            if len(found) > PAGE_KEYS or any(not item.key.startswith(full) for item in found):
                raise RemoteStoreError(f"{where}: a page of the listing holds more than the {PAGE_KEYS:,} keys "
                                       "asked for, or a key outside the prefix asked for", url=where,
                                       code="MalformedListing")
            guard.page([item.key[skip:] for item in found], token)  # keys as the messages name them
            for item in found:
                yield ObjectInfo(item.key[skip:], item.size, item.etag, item.last_modified)
            if token is None:
                return
            params["continuation-token"] = token

    def _list_page(self, params: dict[str, str], guard: ListingGuard) -> tuple[int, bytes]:
        """One attempt at a page; its time charged to ``guard``, which raises once the listing's budget is spent
        (else a timeout was one slow request)."""
        started = time.monotonic()
        try:
            return self._conn.signed_get(params, time_left=guard.time_left, max_bytes=self.listing.page_bytes)
        finally:
            timed(guard, started)

    def server_now(self) -> datetime:
        """The server's clock (its ``Date`` header, 1 s resolution): lease ages never trust ours.

        One presigned HEAD of the bucket: obstore shows no response headers, and every HTTP answer
        carries ``Date`` (RFC 9110), so nothing needs writing to learn the time."""
        status, headers = self._presigned("HEAD", "", "HeadBucket")
        self._raise_for(status, None)
        date = headers.get("Date")
        return parsedate_to_datetime(date) if date else datetime.now(UTC)

    # -- deletes
    def delete(self, key: str) -> None:
        """Idempotent, as in S3: a missing key is not an error."""
        self._count("DeleteObject")
        with self._mapped(key):
            self.retrying(lambda: self._obstore.delete(self.store, self.prefix + key), key)

    def delete_if_match(self, key: str, etag: str) -> bool:
        """Delete only while the ETag still matches: False if the object changed or vanished."""
        status, _ = self._presigned("DELETE", key, "DeleteObject", **{"If-Match": etag})
        if status in (*NOT_CREATED, 404):
            return False
        self._raise_for(status, key)
        return True

    def uploads_before(self, cutoff: datetime) -> list[Upload]:
        """The multipart uploads under the prefix started before ``cutoff`` (a killed publisher's parts), in
        the listing's order. Through boto3 (obstore cannot list multipart uploads), a page per request, with
        the bounds of every listing (:class:`~artifactkit.store.s3.listing.ListingGuard`)."""
        found = []
        client = self._conn.boto3_client()
        guard = ListingGuard(self.url(), self.listing, what="listing of multipart uploads")
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix, "MaxUploads": PAGE_KEYS}
        with self._mapped():
            while True:
                self._count("ListMultipartUploads")
                started = time.monotonic()
                page = self.retrying(lambda: client.list_multipart_uploads(**params))
                timed(guard, started)
                items = page.get("Uploads", [])
                marker = (str(page.get("NextKeyMarker", "")), str(page.get("NextUploadIdMarker", "")))
                more = bool(page.get("IsTruncated"))
                guard.page([str(item["Key"])[len(self.prefix):] for item in items], "\n".join(marker) if more else None,
                           ids=[str(item["UploadId"]) for item in items])
                found += [Upload(str(item["Key"])[len(self.prefix):], str(item["UploadId"]), item["Initiated"])
                          for item in items if item["Initiated"] < cutoff]
                if not more:
                    return found
                params.update(KeyMarker=marker[0], UploadIdMarker=marker[1])

    def abort_upload(self, upload: Upload) -> None:
        """Abort one multipart upload; its parts' bytes are freed by the server."""
        client = self._conn.boto3_client()
        with self._mapped(upload.key):
            self._count("AbortMultipartUpload")
            try:
                self.retrying(lambda: client.abort_multipart_upload(Bucket=self.bucket, Key=self.prefix + upload.key,
                                                                    UploadId=upload.upload_id), upload.key)
            except Exception as err:
                if self.translate(err, upload.key).context.get("code") != "NoSuchUpload":
                    raise
                # Gone: an attempt whose answer was lost aborted it, or another gc did.

    def abort_uploads_before(self, cutoff: datetime, *, dry_run: bool = False) -> list[str]:
        """Abort the uploads :meth:`uploads_before` lists (``dry_run``: only list them); their keys."""
        uploads = self.uploads_before(cutoff)
        if not dry_run:
            for upload in uploads:
                self.abort_upload(upload)
        return [upload.key for upload in uploads]

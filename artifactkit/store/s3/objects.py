"""The one module that talks to boto3: typed calls on one bucket, botocore errors mapped to ours.

Endpoint, region, credentials and profile come only from the standard AWS chain
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``~/.aws/config`` ...). What this adds:
bounded timeouts and retries, and a small error vocabulary. boto3 is imported on first use, so
``import artifactkit`` works without the ``s3`` extra and *using* an ``s3://`` store names the extra.

Facts it rests on (measured against SeaweedFS 4.48 and botocore 1.44, see ``docs/s3.md``):
``put_object(IfNoneMatch="*")`` answers 412 on an existing key (AWS may answer a racing conditional
write with 409 ``ConditionalRequestConflict`` instead; both mean "not created"); ``IfMatch`` on
PutObject needs botocore >= 1.35.69; HEAD on a missing key says ``404`` whether the key or the
bucket is missing, so one ``head_bucket`` tells them apart; a plain-http endpoint never reads
``AWS_CA_BUNDLE``, so TLS settings for real endpoints are left alone.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import IO, Any, Final

import attrs

from artifactkit.errors import (
    BucketNotFoundError,
    MissingExtraError,
    RemoteAuthError,
    RemoteStoreError,
    RemoteUnavailableError,
)

MIB: Final = 1 << 20
#: Blobs above this go up in parts (and come down in ranges) of ``PART_SIZE``.
MULTIPART_THRESHOLD: Final = 64 * MIB
PART_SIZE: Final = 16 * MIB

_AUTH_CODES: Final = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403",
                                "ExpiredToken", "InvalidToken", "TokenRefreshRequired"})
_NOT_CREATED: Final = (409, 412)  # 409: AWS's ConditionalRequestConflict for racing conditional writes


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"s3:// stores need boto3>=1.35.69: pip install 'artifactkit[s3]' ({err})", extra="s3") from err


@attrs.frozen
class ObjectInfo:
    """One listed or HEADed object: key relative to the store prefix, size, ETag, server time of writing."""

    key: str
    size: int
    etag: str
    last_modified: datetime


def _code(err: Any) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _status(err: Any) -> int:
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class Bucket:
    """The objects of one bucket under one key prefix, with errors mapped to artifactkit's."""

    def __init__(self, bucket: str, prefix: str, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 30.0,
                 max_attempts: int = 3, max_connections: int = 16) -> None:
        boto3 = _import("boto3")
        config = _import("botocore.config").Config(
            connect_timeout=connect_timeout_s, read_timeout=read_timeout_s,
            # "standard" retries throttling, 5xx and dropped connections, never a 4xx such as 412.
            retries={"max_attempts": max_attempts, "mode": "standard"}, max_pool_connections=max_connections)
        exceptions = _import("botocore.exceptions")
        self._client_error: type[Exception] = exceptions.ClientError
        self._botocore_error: type[Exception] = exceptions.BotoCoreError
        self._exc = exceptions
        self.client: Any = boto3.session.Session().client("s3", config=config)
        self.bucket = bucket
        self.prefix = prefix
        self._errors = (self._client_error, self._botocore_error)
        # Set once head_bucket answered: a later 404 on a HEAD then means a missing key. A bucket deleted
        # after that still shows up, as NoSuchBucket on the next PUT or GET (measured: re-checking on
        # every miss cost one extra request per new blob, 10,002 on a 10,000-file first publish).
        self._bucket_seen = False

    @property
    def endpoint(self) -> str:
        """The server's URL, as the AWS chain resolved it (``AWS_ENDPOINT_URL``, config, or AWS itself)."""
        return str(self.client.meta.endpoint_url)

    def url(self, key: str | None = None) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key or ''}"

    def translate(self, err: Exception, key: str | None = None) -> RemoteStoreError:
        """A botocore exception as one of ours, naming the object and the server's code."""
        where = self.url(key)
        exc = self._exc
        if isinstance(err, self._client_error):
            code, status = _code(err), _status(err)
            text = getattr(err, "response", {}).get("Error", {}).get("Message", "") or code
            if code == "NoSuchBucket":
                return BucketNotFoundError(f"{where}: bucket {self.bucket!r} does not exist", url=where, code=code)
            if code in _AUTH_CODES:
                return RemoteAuthError(f"{where}: access refused ({code}: {text}); check AWS_ACCESS_KEY_ID/"
                                       "AWS_SECRET_ACCESS_KEY or the profile", url=where, code=code)
            if status >= 500:
                return RemoteUnavailableError(f"{where}: server error {code} (HTTP {status})", url=where, code=code)
            return RemoteStoreError(f"{where}: {code} (HTTP {status}): {text}", url=where, code=code)
        if isinstance(err, exc.NoCredentialsError):
            return RemoteAuthError(f"{where}: no credentials found in the AWS environment/config chain",
                                   url=where, code="NoCredentials")
        if isinstance(err, exc.ConnectTimeoutError | exc.ReadTimeoutError | exc.EndpointConnectionError
                      | exc.ConnectionClosedError | exc.IncompleteReadError):
            return RemoteUnavailableError(f"{where}: object store unreachable or too slow: {err}",
                                          url=where, code=type(err).__name__)
        return RemoteStoreError(f"{where}: {type(err).__name__}: {err}", url=where, code=type(err).__name__)

    @contextlib.contextmanager
    def _mapped(self, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except self._errors as err:
            raise self.translate(err, key) from err

    def check_bucket(self) -> None:
        """Raise :class:`BucketNotFoundError` (or an auth/unreachable error) unless the bucket answers."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            self._bucket_seen = True
        except self._client_error as err:
            if _status(err) == 404:
                raise BucketNotFoundError(f"{self.url()}: bucket {self.bucket!r} does not exist",
                                          url=self.url(), code="NoSuchBucket") from err
            raise self.translate(err) from err
        except self._botocore_error as err:
            raise self.translate(err) from err

    # -- writes
    def put(self, key: str, body: bytes | IO[bytes], *, sha256: str | None = None,
            metadata: dict[str, str] | None = None) -> str:
        """Unconditional PUT; with ``sha256`` the server refuses a body that does not hash to it."""
        extra: dict[str, Any] = {"Metadata": metadata or {}}
        if sha256 is not None:
            extra["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(sha256)).decode()
        with self._mapped(key):
            return str(self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body, **extra)["ETag"])

    def create(self, key: str, body: bytes, *, metadata: dict[str, str] | None = None) -> str | None:
        """Create ``key`` only if absent (``If-None-Match: *``): its ETag, or None if it already existed."""
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body,
                                              IfNoneMatch="*", Metadata=metadata or {})
        except self._client_error as err:
            if _status(err) not in _NOT_CREATED:
                raise self.translate(err, key) from err
            if getattr(err, "response", {}).get("ResponseMetadata", {}).get("RetryAttempts", 0):
                # botocore retried (a timeout after the server applied our write): the 412 may be ours.
                # Same bytes are not proof (two publishers of one tree write equal manifests): the
                # caller's metadata (a nonce) is.
                info, stored = self.head(key), self.get_bounded(key, len(body))
                if info is not None and stored is not None and stored[:2] == (body, metadata or {}):
                    return info.etag
            return None
        except self._botocore_error as err:
            raise self.translate(err, key) from err
        return str(response["ETag"])

    def replace(self, key: str, body: bytes, etag: str) -> str | None:
        """Compare-and-swap (``If-Match``): the new ETag, or None if the object changed or vanished."""
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body, IfMatch=etag)
        except self._client_error as err:
            if _status(err) in (*_NOT_CREATED, 404):
                return None
            raise self.translate(err, key) from err
        except self._botocore_error as err:
            raise self.translate(err, key) from err
        return str(response["ETag"])

    def upload_file(self, key: str, path: str) -> None:
        """Upload a large file in ``PART_SIZE`` parts on boto3's transfer threads (unconditional)."""
        transfer = _import("boto3.s3.transfer")
        config = transfer.TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=PART_SIZE,
                                         max_concurrency=4, use_threads=True)
        try:
            self.client.upload_file(path, self.bucket, self.prefix + key, Config=config)
        except Exception as err:  # s3transfer wraps botocore errors in S3UploadFailedError
            cause = err if isinstance(err, self._errors) else err.__cause__ or err.__context__
            if isinstance(cause, self._errors):
                raise self.translate(cause, key) from err
            raise

    # -- reads
    @contextlib.contextmanager
    def stream(self, key: str, *, first: int | None = None, last: int | None = None) -> Iterator[IO[bytes]]:
        """The object's body as a stream (``first``..``last`` inclusive for a byte range)."""
        extra = {} if first is None else {"Range": f"bytes={first}-{'' if last is None else last}"}
        with self._mapped(key):
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key, **extra)["Body"]
        try:
            with self._mapped(key):
                yield body
        finally:
            body.close()

    def get_bytes(self, key: str) -> bytes:
        with self.stream(key) as body:
            return bytes(body.read())

    def get_bounded(self, key: str, max_bytes: int) -> tuple[bytes, dict[str, str], int] | None:
        """(body, user metadata, Content-Length) of ``key``, or None if absent; at most ``max_bytes + 1``
        bytes of the body are read, none at all when the server says it is longer than ``max_bytes``."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            try:
                length = int(response.get("ContentLength", -1))
                # Never read(max_bytes + 1) at once: http.client allocates that many bytes first (128 MiB a
                # manifest). The length the server gave + 1, or chunks up to the limit when it gave none.
                body = b"" if length > max_bytes else _read_at_most(response["Body"],
                                                                    (length if length >= 0 else max_bytes) + 1)
                return body, dict(response.get("Metadata", {})), max(length, len(body))
            finally:
                response["Body"].close()  # unread bytes are dropped with the connection, never buffered
        except self._client_error as err:
            if _code(err) in ("NoSuchKey", "404"):
                return None
            raise self.translate(err, key) from err
        except self._botocore_error as err:
            raise self.translate(err, key) from err

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and time of an object, or None if absent (a missing bucket is an error)."""
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except self._client_error as err:
            if _status(err) != 404:
                raise self.translate(err, key) from err
            if not self._bucket_seen:
                self.check_bucket()
            return None
        except self._botocore_error as err:
            raise self.translate(err, key) from err
        return ObjectInfo(key, int(response["ContentLength"]), str(response["ETag"]), response["LastModified"])

    def objects_under(self, under: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``under``, in key order (1 request per 1,000 keys)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + under)
        skip = len(self.prefix)
        with self._mapped(under):
            for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"][skip:], int(obj["Size"]), str(obj["ETag"]), obj["LastModified"])

    def server_now(self) -> datetime:
        """The server's clock (its ``Date`` header, 1 s resolution): lease ages never trust ours."""
        with self._mapped():
            response = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + "locks/", MaxKeys=1)
        date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        return parsedate_to_datetime(date) if date else datetime.now(UTC)

    # -- deletes
    def delete(self, key: str) -> None:
        """Idempotent, as in S3: a missing key is not an error."""
        with self._mapped(key):
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    def delete_if_match(self, key: str, etag: str) -> bool:
        """Delete only while the ETag still matches: False if the object changed or vanished."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key, IfMatch=etag)
        except self._client_error as err:
            if _status(err) in (*_NOT_CREATED, 404):
                return False
            raise self.translate(err, key) from err
        except self._botocore_error as err:
            raise self.translate(err, key) from err
        return True

    def abort_uploads_before(self, cutoff: datetime, *, dry_run: bool = False) -> list[str]:
        """Abort multipart uploads under the prefix started before ``cutoff`` (a killed publisher's parts); their
        keys. ``dry_run``: only list them."""
        aborted = []
        with self._mapped():
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket,
                                                                                 Prefix=self.prefix)
            for page in pages:
                for upload in page.get("Uploads", []):
                    if upload["Initiated"] < cutoff and dry_run:
                        aborted.append(str(upload["Key"])[len(self.prefix):])
                    elif upload["Initiated"] < cutoff:
                        self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                           UploadId=upload["UploadId"])
                        aborted.append(str(upload["Key"])[len(self.prefix):])
        return aborted


def _read_at_most(body: Any, count: int) -> bytes:
    """Up to ``count`` bytes of a response body, in chunks of at most 1 MiB (memory grows with what arrives)."""
    chunks, total = [], 0
    while total < count and (chunk := body.read(min(1 << 20, count - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)

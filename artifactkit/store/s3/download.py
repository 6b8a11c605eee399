"""Download from a bucket: stream blobs into a local blob dir, hashing as they land, then the local restore.

Every needed blob is fetched once (threads; large blobs in parallel byte ranges) into a private
directory next to ``dest`` and its sha256 checked there, so a corrupt or missing object is named
as such before anything is restored. Then :func:`artifactkit.store.download.restore_tree` — the
very restore a local store uses — materializes the tree from that directory with exact metadata
and renames it into place, or leaves nothing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Final

from artifactkit.errors import IntegrityError, IntegrityFailure, RemoteStoreError
from artifactkit.store.content import CHUNK, sha256_of_fd, write_all
from artifactkit.store.download import BlobSource, restore_tree
from artifactkit.store.manifest import Manifest
from artifactkit.store.restore_meta import Owners
from artifactkit.store.s3.layout import blob_key
from artifactkit.store.s3.objects import MULTIPART_THRESHOLD, PART_SIZE, Bucket

WORKERS: Final = 8


def _missing_or(err: RemoteStoreError, sha: str, bucket: Bucket) -> Exception:
    if getattr(err, "code", "") in ("NoSuchKey", "404"):
        return IntegrityError(f"blob {sha} is missing from {bucket.url()}", path=bucket.url(blob_key(sha)),
                              blob=sha, failed=IntegrityFailure.MISSING)
    return err


def _corrupt(sha: str, bucket: Bucket, actual: str, count: int, size: int) -> IntegrityError:
    return IntegrityError(f"blob {sha} in {bucket.url()} is corrupt: {count} bytes hashing to {actual}, "
                          f"the manifest says {size} bytes", path=bucket.url(blob_key(sha)), blob=sha,
                          actual=actual, failed=IntegrityFailure.CORRUPT)


def fetch_whole(bucket: Bucket, sha: str, size: int, path: str) -> None:
    """Stream one blob into ``path``, hashing every chunk as it is written."""
    digest, count = hashlib.sha256(), 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
    try:
        with bucket.stream(blob_key(sha)) as body:
            while chunk := body.read(CHUNK):
                digest.update(chunk)
                write_all(fd, chunk)
                count += len(chunk)
    except RemoteStoreError as err:
        raise _missing_or(err, sha, bucket) from err
    finally:
        os.close(fd)
    if digest.hexdigest() != sha or count != size:
        raise _corrupt(sha, bucket, digest.hexdigest(), count, size)


def fetch_range(bucket: Bucket, sha: str, fd: int, first: int, last: int) -> None:
    """One byte range of a large blob, written at its offset (checked as a whole afterwards)."""
    offset = first
    try:
        with bucket.stream(blob_key(sha), first=first, last=last) as body:
            while chunk := body.read(CHUNK):
                view = memoryview(chunk)
                while view:  # pwrite may write less than asked
                    written = os.pwrite(fd, view, offset)
                    offset, view = offset + written, view[written:]
    except RemoteStoreError as err:
        raise _missing_or(err, sha, bucket) from err


def _open_large(bucket: Bucket, sha: str, size: int, path: str) -> int:
    """A file of the blob's size to fetch ranges into, once the object is known to have that size."""
    info = bucket.head(blob_key(sha))
    if info is None:
        raise _missing_or(RemoteStoreError("absent", code="404"), sha, bucket)
    if info.size != size:
        raise _corrupt(sha, bucket, "(not read)", info.size, size)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
    os.ftruncate(fd, size)
    return fd


def _check_large(bucket: Bucket, sha: str, fd: int, size: int) -> None:
    actual, count = sha256_of_fd(fd)
    if actual != sha or count != size:
        raise _corrupt(sha, bucket, actual, count, size)


def fetch_blobs(bucket: Bucket, needed: dict[str, int], blob_dir: str, *, workers: int = WORKERS) -> None:
    """Fetch every ``sha -> size`` into ``blob_dir/<sha>``, each proven to hash to its name."""
    large: dict[str, int] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="artifactkit-download") as pool:
        futures: list[Future[None]] = []
        try:
            for sha, size in sorted(needed.items()):
                path = os.path.join(blob_dir, sha)
                if size < MULTIPART_THRESHOLD:
                    futures.append(pool.submit(fetch_whole, bucket, sha, size, path))
                    continue
                large[sha] = _open_large(bucket, sha, size, path)
                futures += [pool.submit(fetch_range, bucket, sha, large[sha], first, min(first + PART_SIZE, size) - 1)
                            for first in range(0, size, PART_SIZE)]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()
            for sha, fd in large.items():
                _check_large(bucket, sha, fd, needed[sha])
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            wait(futures)  # no thread may still write into fds closed below
            for fd in large.values():
                os.close(fd)


def download_manifest(bucket: Bucket, manifest: Manifest, dest: str | os.PathLike[str], *,
                      owners: Owners = "exact", workers: int | None = None) -> None:
    """Materialize ``manifest`` at ``dest`` (which must not exist) with exact metadata, or leave nothing."""
    target = os.path.abspath(os.fspath(dest))
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "download destination already exists", target)
    # Beside dest: same filesystem and quota as the tree it becomes; left behind only by a SIGKILL.
    blob_dir = tempfile.mkdtemp(prefix=".artifactkit-s3-blobs-", dir=os.path.dirname(target))
    try:
        needed = {entry.sha256: entry.size for entry in manifest.files() if entry.sha256 is not None}
        fetch_blobs(bucket, needed, blob_dir)
        restore_tree(manifest.entries, target, blob_path=BlobSource(blob_dir), shape_checked=True, owners=owners,
                     workers=workers)
    finally:
        shutil.rmtree(blob_dir, ignore_errors=True)

"""Download from a bucket: stream blobs into a local blob dir, hashing as they land, for the one restore.

Every needed blob is fetched once (threads; large blobs in parallel byte ranges) into a private
directory next to ``dest`` (:mod:`~artifactkit.store.private_dir`: written only through its
fd, so a directory swapped by whoever can write DEST's parent cannot redirect a byte) and its
sha256 checked there, so a corrupt or missing object is named as such before anything is restored.
No more than the manifest's size + 1 bytes of an object are read: a planted multi-GiB object costs
one chunk, not a disk. Then :func:`artifactkit.store.download.restore_tree` — the
very restore a local store uses — materializes the tree from that directory with exact metadata
and renames it into place, or leaves nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from typing import Final

from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.content import CHUNK, sha256_of_fd, write_all
from artifactkit.errors import IntegrityError, IntegrityFailure, RemoteStoreError, UnsafeStoreError
from artifactkit.store.private_dir import PrivateDir
from artifactkit.store.progress import Reporter
from artifactkit.store.s3.layout import blob_key
from artifactkit.store.s3.objects import PART_SIZE, Bucket

#: GETs at once. A small blob's GET is a round trip, not a transfer: on loopback SeaweedFS under load, 2,000 x 1 KiB
#: came down in 7.5-8.0 s with 8 and 5.2-5.9 s with 32 (three pairs, load average 20; client CPU 1.0-1.2 s
#: either way), where ``rclone copy`` took 8.0-10.3 s. The connection pool keeps as many (``Limits``).
WORKERS: Final = 32
#: Blobs from this size come down in parallel byte ranges of ``PART_SIZE`` (checked by a re-read once all have
#: landed); smaller ones in one GET hashed as it is written. On loopback SeaweedFS one stream of 256 MiB took
#: 1.23-1.27 s wall and 1.15 s CPU against 1.35-1.47 s and 1.35-1.5 s in 16 ranges (/tmp/large_dl.py, paired,
#: 2026-12-02): the re-read costs more than parallel streams gain there. A high-latency endpoint gains more
#: from ranges; 1 GiB keeps them for the blobs where one stream would take longest.
RANGES_FROM: Final = 1 << 30
_NEW_BLOB: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


#: The private directory beside DEST that holds the fetched blobs (:class:`PrivateDir`).
BLOBS_PREFIX: Final = ".artifactkit-s3-blobs-"

def _missing_or(err: RemoteStoreError, sha: str, bucket: Bucket) -> Exception:
    if getattr(err, "code", "") in ("NoSuchKey", "404"):
        return IntegrityError(f"blob {sha} is missing from {bucket.url()}", path=bucket.url(blob_key(sha)),
                              blob=sha, failed=IntegrityFailure.MISSING)
    return err


def _corrupt(sha: str, bucket: Bucket, actual: str, count: int, size: int) -> IntegrityError:
    found = f"over {size} bytes (reading stopped there)" if count > size else f"{count} bytes hashing to {actual}"
    return IntegrityError(f"blob {sha} in {bucket.url()} is corrupt: {found}, the manifest says {size} bytes",
                          path=bucket.url(blob_key(sha)), blob=sha, actual=actual, failed=IntegrityFailure.CORRUPT)


def fetch_whole(bucket: Bucket, sha: str, size: int, dir_fd: int) -> None:
    """Stream one blob into ``dir_fd/sha``, hashing every chunk as it is written; at most ``size + 1`` bytes.
    A body that breaks off midway is fetched again from its first byte (within the retry budget)."""
    fd = os.open(sha, _NEW_BLOB, 0o400, dir_fd=dir_fd)
    attempts = itertools.count()
    try:
        actual, count = bucket.retrying(lambda: _stream_into(bucket, sha, size, fd, again=next(attempts) > 0),
                                        blob_key(sha))
    except RemoteStoreError as err:
        raise _missing_or(err, sha, bucket) from err
    finally:
        os.close(fd)
    if actual != sha or count != size:
        raise _corrupt(sha, bucket, actual, count, size)


def _stream_into(bucket: Bucket, sha: str, size: int, fd: int, *, again: bool) -> tuple[str, int]:
    """One attempt of :func:`fetch_whole`: (sha256, bytes) of what it wrote into ``fd``, emptied first ``again``."""
    digest, count = hashlib.sha256(), 0
    if again:  # a first attempt's file is new and empty: two system calls a blob saved
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
    with bucket.stream(blob_key(sha)) as body:
        # One byte past the manifest's size already proves corruption; the rest is never read.
        while count <= size and (chunk := body.read(min(CHUNK, size + 1 - count))):
            digest.update(chunk)
            write_all(fd, chunk)
            count += len(chunk)
    return digest.hexdigest(), count


def fetch_range(bucket: Bucket, sha: str, fd: int, first: int, last: int) -> None:
    """One byte range of a large blob, written at its offset (checked as a whole afterwards); fetched again
    whole if it breaks off (within the retry budget)."""
    try:
        bucket.retrying(lambda: _range_into(bucket, sha, fd, first, last), blob_key(sha))
    except RemoteStoreError as err:
        raise _missing_or(err, sha, bucket) from err


def _range_into(bucket: Bucket, sha: str, fd: int, first: int, last: int) -> None:
    offset = first
    with bucket.stream(blob_key(sha), first=first, last=last) as body:
        while chunk := body.read(CHUNK):
            if offset + len(chunk) > last + 1:  # more than the range asked for: not this blob's bytes
                raise _corrupt(sha, bucket, "(not read)", offset + len(chunk), last + 1)
            view = memoryview(chunk)
            while view:  # pwrite may write less than asked
                written = os.pwrite(fd, view, offset)
                offset, view = offset + written, view[written:]


def _open_large(bucket: Bucket, sha: str, size: int, dir_fd: int) -> int:
    """A file of the blob's size to fetch ranges into, once the object is known to have that size."""
    info = bucket.head(blob_key(sha))
    if info is None:
        raise _missing_or(RemoteStoreError("absent", code="404"), sha, bucket)
    if info.size != size:
        raise _corrupt(sha, bucket, "(not read)", info.size, size)
    fd = os.open(sha, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400, dir_fd=dir_fd)
    os.ftruncate(fd, size)
    return fd


def _check_large(bucket: Bucket, sha: str, fd: int, size: int) -> None:
    actual, count = sha256_of_fd(fd)
    if actual != sha or count != size:
        raise _corrupt(sha, bucket, actual, count, size)


def fetch_blobs(bucket: Bucket, needed: dict[str, int], blob_dir_fd: int, *, workers: int = WORKERS,
                progress: Reporter | None = None) -> None:
    """Fetch every ``sha -> size`` into ``blob_dir_fd/<sha>``, each proven to hash to its name; ``progress`` is
    told of each blob (or range of one) as it lands."""
    large: dict[str, int] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="artifactkit-download") as pool:
        futures: dict[Future[None], tuple[int, int]] = {}  # -> (blobs, bytes) it completes
        try:
            for sha, size in sorted(needed.items()):
                if size < RANGES_FROM:
                    futures[pool.submit(fetch_whole, bucket, sha, size, blob_dir_fd)] = (1, size)
                    continue
                large[sha] = _open_large(bucket, sha, size, blob_dir_fd)
                for first in range(0, size, PART_SIZE):
                    last = min(first + PART_SIZE, size) - 1
                    futures[pool.submit(fetch_range, bucket, sha, large[sha], first, last)] = \
                        (int(last == size - 1), last + 1 - first)
            # In this thread, as each lands: the first failure stops the rest (as FIRST_EXCEPTION would).
            for future in as_completed(futures):
                future.result()
                if progress is not None:
                    progress.advance(*futures[future])
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


@contextlib.contextmanager
def fetched_blobs(bucket: Bucket, needed: dict[str, int], dest: str,
                  progress: Reporter | None = None) -> Iterator[BlobSource]:
    """The blobs ``needed`` (digest -> size), fetched and checked in a private directory beside ``dest``.

    :class:`UnsafeStoreError` if someone swapped that directory: before the restore, the download stops
    there; after it (the name swapped in the last instant), ``dest`` is complete and verified and the error
    says so.
    """
    # Beside dest: same filesystem and quota as the tree it becomes; left behind only by a SIGKILL,
    # and then swept by the next download into the same parent.
    blobs = PrivateDir(os.path.dirname(dest), BLOBS_PREFIX, hex_digits=16)
    try:
        fetch_blobs(bucket, needed, blobs.fd, progress=progress)
        blobs.check()
        yield BlobSource(blobs.read_path(), dir_fd=blobs.fd)
    except BaseException as err:
        if blobs.close():
            err.add_note(f"the private directory {blobs.where} was also swapped; nothing outside it was written")
        raise
    if blobs.close():
        why = "its name was swapped by someone else after the restore"
        raise UnsafeStoreError(f"download to {dest} completed and verified exact, but the private directory "
                               f"{blobs.where} beside it was swapped ({why}); its blobs were removed through its "
                               "fd and the object now under its name was left alone", path=blobs.where, why=why,
                               dest=dest)

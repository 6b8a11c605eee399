"""Read a source file once: hash it and, when its blob is new, stage its bytes for the store."""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Final

from artifactkit.errors import SourceChangedError
from artifactkit.linux import open_noatime
from artifactkit.meta import FileMeta

CHUNK: Final = 1 << 20
# Files up to this size are hashed from memory and written only if their blob is new, so a
# re-publish of unchanged content writes nothing; larger files stream into staging as they hash.
IN_MEMORY_LIMIT: Final = 8 << 20


def _changed(path: str, captured: FileMeta, identity: tuple[int, int], st: os.stat_result, when: str) -> None:
    what = []
    if (st.st_dev, st.st_ino) != identity:
        what.append("was replaced by another file")
    if st.st_size != captured.size:
        what.append(f"size {captured.size} -> {st.st_size}")
    if st.st_mtime_ns != captured.mtime_ns:
        what.append(f"mtime_ns {captured.mtime_ns} -> {st.st_mtime_ns}")
    if captured.ctime_ns is not None and st.st_ctime_ns != captured.ctime_ns:
        what.append(f"ctime_ns {captured.ctime_ns} -> {st.st_ctime_ns}")
    if not stat.S_ISREG(st.st_mode):
        what.append("is no longer a regular file")
    if what:
        raise SourceChangedError(
            f"source {path!r} changed {when}: {', '.join(what)}; publish again once it is stable",
            path=path)


def read_source(path: str, captured: FileMeta, identity: tuple[int, int], *,
                stage_fd: int, stage_name: str) -> tuple[str, bool, bytes | None]:
    """Hash ``path`` and return ``(sha256, noatime_held, data)``.

    ``data`` is the content of a file small enough to keep in memory (the caller writes it only if
    its blob is missing, so re-publishing unchanged content writes nothing). A larger file has no
    digest until it is read, so it streams into ``stage_name`` under ``stage_fd`` while hashing and
    ``data`` is ``None``. The file must not change between capture and the end of its read.
    """
    fd, noatime = open_noatime(path)
    try:
        _changed(path, captured, identity, os.fstat(fd), "between capture and read")
        digest = hashlib.sha256()
        data: bytes | None = None
        if captured.size <= IN_MEMORY_LIMIT:
            chunks = []
            total = 0
            while chunk := os.read(fd, max(CHUNK, captured.size - total + 1)):
                chunks.append(chunk)
                total += len(chunk)
            data = b"".join(chunks)
            digest.update(data)
            count = total
        else:
            count = _stream(fd, digest, stage_fd, stage_name)
        if count != captured.size:
            raise SourceChangedError(
                f"source {path!r} changed while read: {count} bytes read, {captured.size} captured",
                path=path)
        _changed(path, captured, identity, os.fstat(fd), "while being read")
    finally:
        os.close(fd)
    return digest.hexdigest(), noatime, data


def _stream(fd: int, digest: hashlib._Hash, stage_fd: int, stage_name: str) -> int:
    out = os.open(stage_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=stage_fd)
    count = 0
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    try:
        with open(fd, "rb", buffering=0, closefd=False) as stream:
            while n := stream.readinto(buffer):
                digest.update(view[:n])
                _write_all(out, view[:n])
                count += n
    finally:
        os.close(out)
    return count


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_staged(stage_fd: int, stage_name: str, data: bytes) -> None:
    """Write in-memory content to a staging file (read-only mode: blobs are immutable)."""
    out = os.open(stage_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=stage_fd)
    try:
        _write_all(out, data)
    finally:
        os.close(out)

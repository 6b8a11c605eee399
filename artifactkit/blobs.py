"""Read a source file once: hash it and, when its blob is new, stage its bytes for the store."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from typing import Final

from artifactkit.errors import SourceChangedError
from artifactkit.linux import copy_range, open_noatime
from artifactkit.meta import FileMeta

CHUNK: Final = 1 << 20
# Files up to this size are hashed from memory and written only if their blob is new, so a
# re-publish of unchanged content writes nothing; larger files are copied into staging by the
# kernel while they are hashed (and the copy is dropped if the blob turns out to exist).
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


def read_small(fd: int, size: int) -> bytes:
    """Read a whole regular file expected to hold ``size`` bytes, asking one byte more.

    A short read of a regular file is its end, so the usual case costs one ``read`` instead of two;
    a file longer than ``size`` comes back longer, and the caller's size check refuses it.
    """
    data = os.read(fd, size + 1)
    if len(data) <= size:
        return data
    chunks = [data]
    while chunk := os.read(fd, CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def hash_while_copying(src_fd: int, dst_fd: int, size: int) -> tuple[str, int, int]:
    """Hash ``src_fd`` on this thread while the kernel copies it to ``dst_fd`` on another.

    hashlib releases the GIL on large buffers and ``copy_file_range``/``sendfile`` copy without
    entering user space, so on two cores a large file costs about one sha256 pass instead of a
    hash plus a copy. Returns ``(sha256, bytes hashed, bytes copied)``; the caller compares both
    counts with the size it expects and checks the source did not change meanwhile.
    """
    copied: list[int] = []
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            copied.append(copy_range(src_fd, dst_fd, size))
        except BaseException as err:  # noqa: BLE001 - re-raised on the calling thread below
            failure.append(err)

    worker = threading.Thread(target=copy, name="artifactkit-copy")
    worker.start()
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    hashed = 0
    try:
        while n := os.preadv(src_fd, [buffer], hashed):
            digest.update(view[:n])
            hashed += n
    finally:
        worker.join()
    if failure:
        raise failure[0]
    return digest.hexdigest(), hashed, copied[0]


def read_source(path: str, captured: FileMeta, identity: tuple[int, int], *,
                stage_fd: int, stage_name: str) -> tuple[str, bool, bytes | None]:
    """Hash ``path`` and return ``(sha256, noatime_held, data)``.

    ``data`` is the content of a file small enough to keep in memory (the caller writes it only if
    its blob is missing, so re-publishing unchanged content writes nothing). A larger file has no
    digest until it is read, so it is copied into ``stage_name`` under ``stage_fd`` while it is
    hashed, and ``data`` is ``None``. The file must not change between capture and end of read.
    """
    fd, noatime = open_noatime(path)
    try:
        _changed(path, captured, identity, os.fstat(fd), "between capture and read")
        data: bytes | None = None
        if captured.size <= IN_MEMORY_LIMIT:
            data = read_small(fd, captured.size)
            sha, count = hashlib.sha256(data).hexdigest(), len(data)
        else:
            out = os.open(stage_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=stage_fd)
            try:
                sha, count, copied = hash_while_copying(fd, out, captured.size)
            finally:
                os.close(out)
            if copied != count:
                raise SourceChangedError(
                    f"source {path!r} changed while read: {count} bytes hashed but {copied} copied",
                    path=path)
        if count != captured.size:
            raise SourceChangedError(
                f"source {path!r} changed while read: {count} bytes read, {captured.size} captured",
                path=path)
        _changed(path, captured, identity, os.fstat(fd), "while being read")
    finally:
        os.close(fd)
    return sha, noatime, data


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_staged(stage_fd: int, stage_name: str, data: bytes) -> None:
    """Write in-memory content to a staging file (read-only mode: blobs are immutable)."""
    out = os.open(stage_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444, dir_fd=stage_fd)
    try:
        write_all(out, data)
    finally:
        os.close(out)

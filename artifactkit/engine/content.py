"""Read a source file once: hash it and, when its blob is new, stage its bytes for the store."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, Final

import attrs

from artifactkit._os_calls import named
from artifactkit._syscalls import copy_range, open_noatime
from artifactkit.errors import IntegrityError, IntegrityFailure, SourceChangedError
from artifactkit.metadata.extended import data_extents, read_flags
from artifactkit.metadata.model import Extents, FileMeta

CHUNK: Final = 1 << 20
# Files up to this size are hashed from memory and written only if their blob is new, so a
# re-publish of unchanged content writes nothing; larger files are copied into staging by the
# kernel while they are hashed (and the copy is dropped if the blob turns out to exist).
IN_MEMORY_LIMIT: Final = 8 << 20


def source_changed(path: str, captured: FileMeta, identity: tuple[int, int], st: os.stat_result,
                   when: str) -> SourceChangedError | None:
    """The error a publish raises for the source ``path`` whose ``st`` differs from its capture (``identity``:
    its ``(dev, ino)`` then) in what it names, ``when``; ``None`` where nothing differs."""
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
    if not what:
        return None
    return SourceChangedError(f"source {path!r} changed {when}: {', '.join(what)}; publish again once it is stable",
                              path=path)


def read_small(fd: int, size: int) -> bytes:
    """Read a regular file expected to hold ``size`` bytes: one ``read`` of ``size + 1`` in the usual case.

    Reading stops once ``size`` bytes are in (or at the end): a short read is never taken for the
    end before ``size`` bytes arrived (FUSE, 9p and NFS may return less than asked). Whether the
    file is *longer* is not this function's proof: the caller's digest of exactly these bytes, or
    its ``fstat`` after the read, is. ``pread`` from offset 0: the fd's position is not trusted (the
    ``SEEK_HOLE`` probe before the read moves it to the end).
    """
    data = os.pread(fd, size + 1, 0)
    if len(data) >= size:
        return data
    chunks = [data]
    total = len(data)
    while total < size and (chunk := os.pread(fd, size + 1 - total, total)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def sha256_of_fd(fd: int) -> tuple[str, int]:
    """sha256 and length of everything in ``fd`` from offset 0 (``pread``: the position is left alone)."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    total = 0
    while n := os.preadv(fd, [buffer], total):
        digest.update(view[:n])
        total += n
    return digest.hexdigest(), total


def open_blob(path: str, sha: str, *, where: str, dir_fd: int | None = None, entry: str | None = None) -> int:
    """Open a stored blob for reading: a regular file, or an :class:`IntegrityError` saying what it is.

    Looked at through an ``O_PATH`` fd first (:func:`open_regular`): a blob replaced by a symlink, a FIFO, a
    device or a socket is corruption of the store (reported as such), never followed, waited on or opened.
    ``entry``: the manifest path a download reads it for, which its refusal of a blob that is no file names
    (:func:`not_regular`, as the core's).
    """
    try:
        fd, st = open_regular(path, dir_fd=dir_fd)
    except FileNotFoundError as err:
        raise IntegrityError(f"blob {sha} {where} is missing from the store", path=path, blob=sha,
                             failed=IntegrityFailure.MISSING) from err
    if fd is not None:
        return fd
    if stat.S_ISLNK(st.st_mode):
        cause = OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        raise IntegrityError(f"blob {sha} {where} is a symlink, not stored content", path=path, blob=sha,
                             failed=IntegrityFailure.CORRUPT) from cause
    if entry is not None:
        raise not_regular(sha, where=where, path=entry)
    raise IntegrityError(f"blob {sha} {where} is not a regular file", path=path, blob=sha,
                         failed=IntegrityFailure.CORRUPT)


#: ``O_PATH``: an fd that names the inode without opening the file, so no driver's ``open`` runs and no FIFO
#: writer wakes; ``O_NOFOLLOW`` with it gives the link itself, never its target.
_LOOK: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
#: Where an ``O_PATH`` fd is opened again for reading (procfs; ``_reopen`` says what happens without it).
PROC_FD: Final = "/proc/self/fd"


def open_regular(name: str, *, dir_fd: int | None = None) -> tuple[int | None, os.stat_result]:
    """``name`` opened for reading if it is a regular file, with its ``fstat``; else ``(None, its fstat)``.

    The name is looked at through an ``O_PATH`` fd (``fstat`` on it), and only a regular file is opened, by
    reopening that very inode through procfs: a FIFO, a device node or a socket a writer of the store put under a
    blob's name is never opened, not even for an instant (opening a device runs its driver; opening a FIFO
    wakes a writer waiting on it). ``FileNotFoundError`` if nothing is there.
    """
    look = os.open(name, _LOOK, dir_fd=dir_fd)
    try:
        st = os.fstat(look)
        if not stat.S_ISREG(st.st_mode):
            return None, st
        return _reopen(look, name, dir_fd, st), st
    finally:
        os.close(look)


def _reopen(look: int, name: str, dir_fd: int | None, st: os.stat_result) -> int:
    try:
        return os.open(f"{PROC_FD}/{look}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    # No procfs (a chroot or a container without /proc): by name again, O_NONBLOCK and the same inode required,
    # so only a swap in the microseconds between the look and this open could make it open something else.
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "replaced while it was opened", name)
    return fd


def not_regular(sha: str, *, where: str, path: str) -> IntegrityError:
    """A download's refusal of a blob that is not a regular file (the core's ``not_regular`` is raised as this)."""
    return IntegrityError(f"blob {sha} {where} is not a regular file, not stored content", path=path, blob=sha,
                          failed=IntegrityFailure.CORRUPT)


def check_blob_fd(fd: int, sha: str, size: int, *, where: str, path: str = "") -> None:
    """Refuse a blob that is not a regular file of exactly ``size`` bytes, before any byte of it is read.

    The manifest's size is a hostile writer's claim: a device node under a blob's name would be read
    forever, and an entry claiming 2**62 bytes (of holes) would be hashed for centuries. The real blob's
    ``fstat`` bounds the work to what is stored.
    """
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(sha, where=where, path=path)
    if st.st_size != size:
        raise IntegrityError(f"blob {sha} {where} is corrupt: it has {st.st_size} bytes, the manifest says {size}",
                             path=path, blob=sha, actual=f"{st.st_size} bytes", failed=IntegrityFailure.CORRUPT)


COPY_CHUNK: Final = 8 << 20


def hash_while_copying(src_fd: int, dst_fd: int, size: int) -> tuple[str, int]:
    """Copy up to ``size + 1`` bytes in the kernel on one thread while hashing what *was written*.

    The hash reads the destination back behind the copier, so the digest always names the bytes
    that were stored, even if the source changed in a way no timestamp shows (an ``mmap`` write).
    hashlib releases the GIL on large buffers and ``copy_file_range``/``sendfile`` never enter user
    space, so on two cores a large file costs about one sha256 pass rather than a copy plus a hash.
    Returns ``(sha256, bytes)``; more than ``size`` bytes means the source is longer than expected.
    ``dst_fd`` must be open for reading too. The copier works on its own duplicated fds, so an
    interrupt here cannot leave it writing through an fd number the caller has closed and reused.
    A destination that ends before what landed (cut short behind the copy) ends the digest where it
    ends: the copier checks the destination's size before each chunk and stops at a cut, so no later
    chunk extends the file over a hole read as zeros. A cut while a chunk is in flight (one in-kernel
    call of up to ``COPY_CHUNK``) is not seen: it writes on past the cut over a hole. Only the user's
    own processes can cut it: the staging directories a copy writes into are private to the user.
    Where no thread would start, the copy and then its read-back run on this thread.
    """
    src, dst = os.dup(src_fd), os.dup(dst_fd)
    progress = threading.Condition()
    state: dict[str, int] = {"copied": 0, "done": 0, "stop": 0}
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            while state["copied"] <= size and not state["stop"]:
                if os.fstat(dst).st_size < state["copied"]:
                    # Cut behind the copy: a step more would extend the file over a hole the hasher would read
                    # as zeros (a full length, a digest of bytes the source never held). Stop at the cut.
                    break
                n = copy_range(src, dst, min(COPY_CHUNK, size + 1 - state["copied"]), offset=state["copied"])
                with progress:
                    state["copied"] += n
                    progress.notify_all()
                if n == 0:
                    break
        except BaseException as err:  # noqa: BLE001 - re-raised on the calling thread below
            failure.append(err)
        finally:
            os.close(src)
            os.close(dst)
            with progress:
                state["done"] = 1
                progress.notify_all()

    worker = threading.Thread(target=copy, name="artifactkit-copy", daemon=True)
    try:
        worker.start()
    except RuntimeError:  # no thread would start (RLIMIT_NPROC, a cgroup's pids.max): the copy, then its read-back
        copy()
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    hashed = 0
    try:
        while True:
            with progress:
                while state["copied"] <= hashed and not state["done"]:
                    progress.wait()
                available, finished = state["copied"], state["done"]
            cut = False
            while hashed < available:
                n = os.preadv(dst_fd, [view[:min(CHUNK, available - hashed)]], hashed)
                if n == 0:
                    cut = True  # the destination ends before what landed (cut behind the copy): nothing more to read
                    break
                digest.update(view[:n])
                hashed += n
            if cut or (finished and hashed >= available):
                break
    finally:
        state["stop"] = 1  # a cut or a refused read-back: the copier stops at its next chunk
        if worker.ident is not None:  # started
            worker.join()
    if failure:
        raise failure[0]
    return digest.hexdigest(), hashed


@attrs.frozen
class SourceRead:
    """What one read of a source file found: its digest, whether ``O_NOATIME`` held, the bytes of a
    small dense file (else ``None``: they were staged), and the flags and holes read before the read."""

    sha256: str
    noatime: bool
    data: bytes | None
    flags: int | None
    extents: Extents | None


def read_source(path: str, captured: FileMeta, identity: tuple[int, int], *,
                stage_fd: int, stage_name: str) -> SourceRead:
    """Hash ``path`` once; stage its bytes unless it is small and dense.

    A small dense file's bytes are returned (the caller writes them only if its blob is missing, so
    re-publishing unchanged content writes nothing). A larger file has no digest until it is read, so
    it is copied into ``stage_name`` under ``stage_fd`` while it is hashed. A file with holes is staged
    sparse: only its data runs are copied, the digest is of the logical bytes (holes read as zeros),
    so ``sha256sum`` of the blob still matches. The file must not change between capture and end of read.
    """
    # O_NONBLOCK: a file swapped for a FIFO after the scan must be refused, not hang the open.
    try:
        fd, noatime = named("open", open_noatime, path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        # O_NOFOLLOW met a symlink where the scan saw a regular file: the source changed under us.
        raise SourceChangedError(f"source {path!r} changed between capture and read: it was replaced by a "
                                 "symlink; publish again once it is stable", path=path) from err
    try:
        before = named("fstat", os.fstat, fd)
        if changed := source_changed(path, captured, identity, before, "between capture and read"):
            raise changed
        # Captured from the open fd before its first read, like everything else about the entry.
        flags, extents = named("ioctl", read_flags, fd, path), named("lseek", data_extents, fd, captured.size)
        data: bytes | None = None
        if extents is None and captured.size <= IN_MEMORY_LIMIT:
            data = named("pread", read_small, fd, captured.size)
            sha, count = hashlib.sha256(data).hexdigest(), len(data)
        else:
            # O_RDWR: the digest is taken from what was written to staging, read back.
            out = named("open", os.open, stage_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444,
                        dir_fd=stage_fd)
            try:
                if extents is None:
                    sha, count = named("copy_file_range", hash_while_copying, fd, out, captured.size)
                else:
                    sha, count = named("copy_file_range", copy_sparse, fd, out, captured.size, extents)
            finally:
                os.close(out)
        if count != captured.size:
            raise SourceChangedError(
                f"source {path!r} changed while read: {count} bytes read, {captured.size} captured",
                path=path)
        if changed := source_changed(path, captured, identity, named("fstat", os.fstat, fd), "while being read"):
            raise changed
    finally:
        os.close(fd)
    return SourceRead(sha, noatime, data, flags, extents)


_ZEROS: Final = bytes(CHUNK)


def hash_zeros(digest: Any, count: int) -> None:
    """Feed ``count`` zero bytes (a hole) to ``digest``."""
    while count > 0:
        step = min(count, CHUNK)
        digest.update(_ZEROS[:step] if step < CHUNK else _ZEROS)
        count -= step


def copy_sparse(src_fd: int, dst_fd: int, size: int, extents: Extents) -> tuple[str, int]:
    """Copy only the data runs of a file with holes into ``dst_fd`` (open for reading too), keeping the
    holes; return the sha256 of the logical bytes *as written* (runs read back, holes as zeros) and the
    length. A run cut short (the source shrank) ends the copy: the caller compares the length."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    position = 0
    for start, length in extents:
        hash_zeros(digest, start - position)
        copied = copy_range(src_fd, dst_fd, length, offset=start)
        done = 0
        while done < copied:
            n = os.preadv(dst_fd, [view[:min(CHUNK, copied - done)]], start + done)
            if n == 0:
                break
            digest.update(view[:n])
            done += n
        position = start + done
        if copied < length:
            return digest.hexdigest(), position
    hash_zeros(digest, size - position)
    os.ftruncate(dst_fd, size)
    return digest.hexdigest(), size


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` (``os.write`` may write less than asked)."""
    if not data:
        return
    written = os.write(fd, data)
    if written == len(data):
        return  # the usual case: no view to build
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_staged(stage_fd: int, stage_name: str, data: bytes, *, sync: Callable[[int], None] | None = None) -> None:
    """Write in-memory content to a staging file (read-only mode: blobs are immutable); ``sync(fd)`` (an
    ``fsync``) once it is written, where no barrier comes after."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    out = named("open", os.open, stage_name, flags, 0o444, dir_fd=stage_fd)
    try:
        named("write", write_all, out, data)
        if sync is not None:
            sync(out)
    finally:
        os.close(out)

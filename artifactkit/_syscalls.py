"""Linux syscalls the standard library lacks (``renameat2``, ``syncfs``, ``mount``), via ctypes.

Importing this module never fails anywhere; calling an unavailable syscall raises ``OSError``
with ``ENOSYS`` so callers can choose their documented fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator
from typing import Final

# include/uapi/linux/fs.h
RENAME_NOREPLACE: Final = 1 << 0
# AT_FDCWD from include/uapi/linux/fcntl.h
AT_FDCWD: Final = -100

_libc: ctypes.CDLL | None
try:
    # dlopen(NULL): the C library the interpreter already links, without find_library's ldconfig
    # subprocess (8 ms at every import, paid by each CLI run and each spawned reader).
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - statically linked or exotic platforms: import still succeeds
    _libc = None


def _libc_func(name: str) -> ctypes._NamedFuncPointer | None:
    return getattr(_libc, name, None) if _libc is not None else None


_renameat2 = _libc_func("renameat2")
_syncfs = _libc_func("syncfs")
_mount = _libc_func("mount")
_umount2 = _libc_func("umount2")
# include/uapi/linux/mount.h; MNT_DETACH from include/linux/fs.h (umount2's flags)
MS_BIND: Final = 0x1000
MNT_DETACH: Final = 0x2


def rename_noreplace(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
    """Rename ``src`` to ``dst`` atomically, failing with ``EEXIST`` if ``dst`` exists.

    Plain ``rename`` silently replaces an empty directory (or a file) that appeared at ``dst``
    between a check and the rename; ``RENAME_NOREPLACE`` closes that race in the kernel.
    """
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    result = _renameat2(
        ctypes.c_int(AT_FDCWD if src_dir_fd is None else src_dir_fd), os.fsencode(src),
        ctypes.c_int(AT_FDCWD if dst_dir_fd is None else dst_dir_fd), os.fsencode(dst),
        ctypes.c_uint(RENAME_NOREPLACE),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), src, None, dst)


def syncfs(fd: int) -> None:
    """Flush the whole filesystem that holds ``fd``: one barrier for many staged files."""
    if _syncfs is None:
        os.sync()  # a superset of syncfs: slower, never weaker
        return
    if _syncfs(ctypes.c_int(fd)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def bind_onto_itself(path: str) -> None:
    """Make ``path`` the root of a mount of its own: a bind mount of itself, with its parent mount's
    options (atime policy included). A fanotify mount mark there sees that subtree and nothing else.
    Needs CAP_SYS_ADMIN; an unbindable parent mount refuses with ``EINVAL``."""
    if _mount is None:
        raise OSError(errno.ENOSYS, "mount is not available in this C library")
    target = os.fsencode(path)
    if _mount(target, target, None, ctypes.c_ulong(MS_BIND), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def detach_mount(path: str) -> None:
    """Unmount ``path`` at once (``MNT_DETACH``): gone from the tree now, freed once nobody uses it."""
    if _umount2 is None:
        raise OSError(errno.ENOSYS, "umount2 is not available in this C library")
    if _umount2(os.fsencode(path), ctypes.c_int(MNT_DETACH)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def fsync_dir(path: str, *, dir_fd: int | None = None) -> None:
    """fsync a directory so the names created or renamed in it survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_noatime(path: str, flags: int = os.O_RDONLY, *, dir_fd: int | None = None) -> tuple[int, bool]:
    """Open for reading without moving atime where the kernel allows it.

    ``O_NOATIME`` is allowed for the file's owner or with CAP_FOWNER; anyone else gets ``EPERM``,
    and then the read goes ahead without it. Returns the fd and whether ``O_NOATIME`` held.
    """
    base = flags | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, base | os.O_NOATIME, dir_fd=dir_fd), True
    except PermissionError:
        return os.open(path, base, dir_fd=dir_fd), False


@contextlib.contextmanager
def opened_dir(path: str, *, dir_fd: int | None = None, noatime: bool = False) -> Iterator[int]:
    """A directory fd that refuses to follow a final symlink; closed on exit."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    if noatime:
        fd, _ = open_noatime(path, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    else:
        fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


# openat2(2): include/uapi/linux/openat2.h; syscall number 437 on every Linux architecture
# since the syscall table unification (arch/*/tbl files agree for new syscalls).
_SYS_OPENAT2: Final = 437
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_syscall = _libc_func("syscall")
_openat2_works = _syscall is not None


def open_beneath(dir_fd: int, relpath: str, flags: int, mode: int = 0) -> int:
    """Open ``relpath`` under ``dir_fd`` without following any symlink on the way.

    ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` makes the kernel refuse a link
    planted in any component (``ELOOP``/``EXDEV``), closing the race a path walk in user space
    leaves open. Older kernels fall back to a component-by-component ``O_NOFOLLOW`` walk.
    """
    global _openat2_works  # noqa: PLW0603 - learned once per process: the kernel does not change
    flags |= os.O_CLOEXEC
    if _openat2_works and _syscall is not None:
        how = _OpenHow(flags, mode, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        # Retried on EINTR as os.open is (PEP 475): a signal's Python handler runs between the tries and may
        # raise; FUSE and network filesystems interrupt an open when a signal arrives.
        err = errno.EINTR
        while err == errno.EINTR:
            fd = _syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), os.fsencode(relpath),
                          ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
        if err != errno.ENOSYS:
            raise OSError(err, os.strerror(err), relpath)
        _openat2_works = False
    return _open_walk(dir_fd, relpath, flags, mode)


def _open_walk(dir_fd: int, relpath: str, flags: int, mode: int) -> int:
    parts = relpath.split("/")
    current = dir_fd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            if current != dir_fd:
                os.close(current)
            current = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=current)
    finally:
        if current != dir_fd:
            os.close(current)


def copy_range(src_fd: int, dst_fd: int, count: int, *, offset: int = 0) -> int:
    """Copy up to ``count`` bytes at ``offset`` of ``src_fd`` to the same offset of ``dst_fd`` in the kernel.

    ``copy_file_range`` (a reflink on filesystems that can) first; ``sendfile`` where the kernel
    refuses a cross-filesystem copy (``EXDEV`` since 5.19) or the call is missing. Explicit offsets
    leave the source's file position alone. Returns the bytes copied: fewer than ``count`` only
    when the source ended.
    """
    done = 0
    use_cfr = True
    while done < count:
        if use_cfr:
            try:
                n = os.copy_file_range(src_fd, dst_fd, count - done, offset + done, offset + done)
            except OSError as err:
                if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                use_cfr = False
                continue
        else:
            os.lseek(dst_fd, offset + done, os.SEEK_SET)
            n = os.sendfile(dst_fd, src_fd, offset + done, count - done)
        if n == 0:
            break
        done += n
    return done


# statx(2): include/uapi/linux/stat.h. struct statx keeps stx_btime (a struct statx_timestamp: __s64 tv_sec,
# __u32 tv_nsec, __s32 reserved) at byte 80 of its 256; STATX_BTIME asks for it, and stx_mask says whether the
# filesystem gave it. AT_SYMLINK_NOFOLLOW from include/uapi/linux/fcntl.h.
_statx = _libc_func("statx")
STATX_BTIME: Final = 0x800
AT_SYMLINK_NOFOLLOW: Final = 0x100
_STATX_SIZE: Final = 256
_STATX_BTIME_AT: Final = 80


def birth_time_ns(path: str) -> int | None:
    """The inode's creation time (``statx``'s ``stx_btime``, the link itself for a symlink), or ``None`` where
    the C library or the filesystem has none. Like ``lstat`` it reads no content and moves no time."""
    if _statx is None:
        return None
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(ctypes.c_int(AT_FDCWD), os.fsencode(path), ctypes.c_int(AT_SYMLINK_NOFOLLOW),
              ctypes.c_uint(STATX_BTIME), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    mask = int.from_bytes(buf.raw[0:4], "little")
    if not mask & STATX_BTIME:
        return None
    seconds = int.from_bytes(buf.raw[_STATX_BTIME_AT:_STATX_BTIME_AT + 8], "little", signed=True)
    nanos = int.from_bytes(buf.raw[_STATX_BTIME_AT + 8:_STATX_BTIME_AT + 12], "little")
    return seconds * 1_000_000_000 + nanos

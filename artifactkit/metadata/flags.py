"""Inode flags (``chattr``) through ``FS_IOC_GETFLAGS``/``FS_IOC_SETFLAGS``: the one ioctl module.

Only ``FS_NOATIME_FL`` matters to artifactkit: set on a directory, new inodes created inside
inherit it (on most filesystems) and reads of them stop moving atime. Importing this module never
fails anywhere; *using* it where the kernel lacks the ioctl yields an ``unsupported`` result.

Every flag change goes through :func:`set_noatime_flag`, which refuses any path that resolves
outside the private tree it was given: a flag on a shared ancestor would silently change other
people's atime behaviour for years.
"""

from __future__ import annotations

import enum
import errno
import os
import struct
from typing import Final, Literal

import attrs

from artifactkit._syscalls import open_beneath
from artifactkit.errors import IsolationError, NotInPrivateTreeError

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: import still succeeds, use reports unsupported
    fcntl = None  # type: ignore[assignment]

# include/uapi/linux/fs.h declares these as _IOR('f', 1, long) / _IOW('f', 2, long), but every
# filesystem transfers a C int (see the comment above FS_IOC_GETFLAGS there); the numbers below
# are the x86-64 encodings the kernel actually dispatches on (size field 8 from `long`).
FS_IOC_GETFLAGS: Final = 0x80086601
FS_IOC_SETFLAGS: Final = 0x40086602

_INT: Final = struct.Struct("=i")
_ZERO: Final = _INT.pack(0)


class InodeFlag(enum.IntFlag):
    """Inode flags, named as in include/uapi/linux/fs.h (those ``chattr`` shows that a tree may carry)."""

    FS_SYNC_FL = 0x00000008
    FS_IMMUTABLE_FL = 0x00000010
    FS_APPEND_FL = 0x00000020
    FS_NODUMP_FL = 0x00000040
    FS_NOATIME_FL = 0x00000080
    FS_DIRSYNC_FL = 0x00010000


#: Flags a download restores (``chattr`` letters S, d, D): harmless to set, and part of what a tree means.
RESTORABLE_FLAGS: Final = InodeFlag.FS_SYNC_FL | InodeFlag.FS_NODUMP_FL | InodeFlag.FS_DIRSYNC_FL
#: Flags compared by default: the restorable ones, and immutable/append (never set by a download unless
#: asked, so their loss is reported). ``FS_NOATIME_FL`` is the isolation's own flag, inherited from a
#: private tree: it is reported, not compared. Filesystem-internal bits (extents, inline data) are
#: neither: no tool can set them.
COMPARED_FLAGS: Final = RESTORABLE_FLAGS | InodeFlag.FS_IMMUTABLE_FL | InodeFlag.FS_APPEND_FL
_RESTORABLE_INT: Final = int(RESTORABLE_FLAGS)
#: ``chattr``'s letter for each flag, for readable reports.
FLAG_LETTERS: Final = {InodeFlag.FS_SYNC_FL: "S", InodeFlag.FS_IMMUTABLE_FL: "i", InodeFlag.FS_APPEND_FL: "a",
                       InodeFlag.FS_NODUMP_FL: "d", InodeFlag.FS_NOATIME_FL: "A", InodeFlag.FS_DIRSYNC_FL: "D"}


def flag_letters(value: int) -> str:
    """``chattr``-style letters of the known flags in ``value`` (``-`` for none)."""
    return "".join(letter for flag, letter in FLAG_LETTERS.items() if value & flag) or "-"


FS_NOATIME_FL: Final = InodeFlag.FS_NOATIME_FL

FlagStatus = Literal["ok", "unsupported", "forbidden"]

# ENOTTY: no ioctl at all (ramfs); EOPNOTSUPP: ioctl known, flag not; EINVAL: flag rejected.
_UNSUPPORTED: Final = frozenset({errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})
_FORBIDDEN: Final = frozenset({errno.EPERM, errno.EACCES, errno.EROFS})


@attrs.frozen
class FlagResult:
    """What a flag get/set achieved: ``status``, the flags read (``ok`` only) and the errno."""

    status: FlagStatus
    flags: int | None = None  #: an :class:`InodeFlag` from the getters; a plain int from the restore path
    errno: int | None = None

    @classmethod
    def of_error(cls, err: OSError) -> FlagResult:
        """What a flag call that failed with ``err`` achieved: ``unsupported`` or ``forbidden``; any other error
        is not ours (ENOENT, EBADF, ...) and is raised, an ``OSError`` with errno and filename."""
        if err.errno in _UNSUPPORTED:
            return cls("unsupported", errno=err.errno)
        if err.errno in _FORBIDDEN:
            return cls("forbidden", errno=err.errno)
        raise err

    @property
    def noatime(self) -> bool:
        """Whether ``FS_NOATIME_FL`` was read back on the inode."""
        return self.flags is not None and bool(self.flags & FS_NOATIME_FL)


def _ioctl_int(fd: int, request: int, value: int, where: str) -> int:
    if fcntl is None:  # pragma: no cover
        raise OSError(errno.ENOSYS, "fcntl is not available on this platform", where)
    # An immutable buffer: the real ioctl returns the kernel's copy as bytes. pyfakefs replaces
    # fcntl.ioctl with a no-op returning the int 0, which would let every check pass vacuously.
    result = fcntl.ioctl(fd, request, _INT.pack(value))
    if not isinstance(result, bytes) or len(result) != _INT.size:
        raise IsolationError(
            f"{where!r}: fcntl.ioctl returned {result!r} instead of the kernel's buffer: this is a fake "
            "filesystem (pyfakefs replaces ioctl with a no-op), where atime isolation cannot be proved; "
            "remedy: run on a noatime test filesystem, or pass --artifactkit-base=PATH on one",
            path=where, fs_type="fake", failed="ioctl",
        )
    return int(_INT.unpack(result)[0])


def _open_for_ioctl(path: str, *, dir_fd: int | None = None) -> int:
    # O_NONBLOCK keeps a FIFO from blocking; opening never moves atime, only reading does.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return os.open(path, flags, dir_fd=dir_fd)


def get_flags_fd(fd: int, where: str = "<fd>") -> FlagResult:
    """Read the inode flags of an open fd."""
    try:
        value = _ioctl_int(fd, FS_IOC_GETFLAGS, 0, where)
    except OSError as err:
        return FlagResult.of_error(err)
    return FlagResult("ok", flags=InodeFlag(value))


def get_flags(path: str | os.PathLike[str]) -> FlagResult:
    """Read the inode flags of ``path`` (not following a final symlink; symlinks have none)."""
    where = os.fspath(path)
    fd = _open_for_ioctl(where)
    try:
        return get_flags_fd(fd, where)
    finally:
        os.close(fd)


def _set_fd(fd: int, on: bool, where: str) -> FlagResult:
    current = get_flags_fd(fd, where)
    if current.status != "ok" or current.flags is None:
        return current
    # int(): ~ of an IntFlag keeps only the *named* bits, which would drop ext4's EXTENTS (0x80000) and make
    # SETFLAGS convert the file's block mapping (or fail with EOPNOTSUPP on a file with several extents).
    value = int(current.flags)
    wanted = InodeFlag(value | int(FS_NOATIME_FL) if on else value & ~int(FS_NOATIME_FL))
    try:
        _ioctl_int(fd, FS_IOC_SETFLAGS, int(wanted), where)
    except OSError as err:
        return FlagResult.of_error(err)
    return get_flags_fd(fd, where)  # read back: the caller decides whether the flag stuck


def _restored(current: int, wanted: int) -> int:
    """The flags word after restoring ``wanted``: its restorable bits, every other bit of ``current`` kept."""
    return (current & ~_RESTORABLE_INT) | (wanted & _RESTORABLE_INT)


def restore_flags_fd(fd: int, wanted: int, where: str) -> FlagResult:
    """Set the :data:`RESTORABLE_FLAGS` bits of an inode a download created to those of ``wanted``.

    Only for inodes the caller created itself and opened beneath its own staging directory (no link
    followed): restoring a tree's flags is not the isolation's flag change, which stays guarded by
    :func:`set_noatime_flag`. Other bits (an inherited ``FS_NOATIME_FL``) are left as they are.
    """
    try:
        current = _ioctl_int(fd, FS_IOC_GETFLAGS, 0, where)
    except OSError as err:
        return FlagResult.of_error(err)
    # Plain ints: ~ of an IntFlag keeps only the named bits and would drop filesystem-internal ones (ext4's
    # EXTENTS, 0x80000), which SETFLAGS must be handed back unchanged; and an enum per file costs more
    # than the ioctl. The result holds the kernel's value as an int.
    target = _restored(current, wanted)
    if target == current:
        return FlagResult("ok", flags=current)
    try:
        _ioctl_int(fd, FS_IOC_SETFLAGS, target, where)
    except OSError as err:
        return FlagResult.of_error(err)
    return get_flags_fd(fd, where)


def flags_if_unchanged(fd: int, wanted: int) -> int | None:
    """The inode's flags if restoring ``wanted`` would change none of them (a new file's inherited flags
    usually match), else ``None``, also on any error: the caller then takes :func:`restore_flags_fd`, which
    sets them, reads them back and names a failure (a fake ``ioctl`` included). One ioctl, no objects:
    the full path cost 2 us a file of a download."""
    if fcntl is None:  # pragma: no cover
        return None
    try:
        raw = fcntl.ioctl(fd, FS_IOC_GETFLAGS, _ZERO)
    except OSError:
        return None
    if type(raw) is not bytes or len(raw) != _INT.size:
        return None
    current: int = _INT.unpack(raw)[0]
    return current if _restored(current, wanted) == current else None


def get_flags_int(fd: int, where: str = "<fd>") -> int | None:
    """The inode flags of an open fd as a plain int, ``None`` where the filesystem reports none
    (the per-file path of publish: no enum built)."""
    try:
        return _ioctl_int(fd, FS_IOC_GETFLAGS, 0, where)
    except OSError as err:
        FlagResult.of_error(err)  # re-raises what is not "unsupported"/"forbidden"
        return None


def resolve_inside(path: str | os.PathLike[str], private_root: str | os.PathLike[str]) -> str:
    """``path`` resolved (links followed) relative to the resolved ``private_root``, or refuse."""
    root = os.path.realpath(private_root)
    resolved = os.path.realpath(path)
    if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
        raise NotInPrivateTreeError(
            f"refusing to change inode flags of {os.fspath(path)!r}: it resolves to {resolved!r}, outside "
            f"the private tree {root!r}; flags are only ever changed inside a tree artifactkit created",
            path=os.fspath(path), resolved=resolved, private_root=root,
        )
    return os.path.relpath(resolved, root)


def set_noatime_flag(path: str | os.PathLike[str], *, private_root: str | os.PathLike[str],
                     on: bool = True) -> FlagResult:
    """Set (or with ``on=False`` clear) ``FS_NOATIME_FL`` on ``path``: the only flag changer.

    ``path`` is resolved with every link followed and must be ``private_root`` or inside it,
    else :class:`NotInPrivateTreeError`. The inode is then opened beneath the root with
    ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``, so a link swapped in after the check
    cannot redirect the change. Returns the flags read back after the change.
    """
    rel = resolve_inside(path, private_root)
    root = os.path.realpath(private_root)
    root_fd = _open_for_ioctl(root)
    try:
        if rel == ".":
            return _set_fd(root_fd, on, root)
        fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            return _set_fd(fd, on, os.path.join(root, rel))
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)

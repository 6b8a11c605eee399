"""fanotify, the kernel interface (ctypes): its constants by their kernel names, groups, marks, events, answers.

inotify cannot name a reader; fanotify can, with CAP_SYS_ADMIN. Everything Linux-specific about
fanotify lives here and nowhere else; the rest of the kit sees :class:`Event` values and
:class:`FanotifyUnavailable` (an ``OSError`` whose message says why: no capability, no syscall, a
kernel without permission events).

Two kinds of group are used (see :mod:`artifactkit.trace.holder` for why): a *permission* group
(``FAN_CLASS_CONTENT``) that also takes ``FAN_OPEN_PERM`` and makes each opener on the marked mount
wait until :func:`allow` answers, and a *notification* group (``FAN_CLASS_NOTIF``) that only reports.
Either way each event carries an fd of the file, opened by the kernel for us without raising events.

Standard library only, and nothing here opens a file: the holder process imports this module
before it marks a mount, and must not open anything on that mount afterwards.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import struct
from typing import Any, Final, NamedTuple


class FanMask(enum.IntFlag):
    """fanotify event bits with their kernel names (include/uapi/linux/fanotify.h)."""

    FAN_ACCESS = 0x00000001
    FAN_MODIFY = 0x00000002
    FAN_CLOSE_WRITE = 0x00000008
    FAN_CLOSE_NOWRITE = 0x00000010
    FAN_OPEN = 0x00000020
    FAN_Q_OVERFLOW = 0x00004000
    FAN_OPEN_PERM = 0x00010000
    FAN_ACCESS_PERM = 0x00020000
    FAN_OPEN_EXEC_PERM = 0x00040000
    FAN_EVENT_ON_CHILD = 0x08000000
    FAN_ONDIR = 0x40000000


# fanotify_init flags and fanotify_mark flags (include/uapi/linux/fanotify.h).
FAN_CLOEXEC: Final = 0x00000001
FAN_NONBLOCK: Final = 0x00000002
FAN_CLASS_NOTIF: Final = 0x00000000
FAN_CLASS_CONTENT: Final = 0x00000004
FAN_UNLIMITED_QUEUE: Final = 0x00000010
FAN_MARK_ADD: Final = 0x00000001
FAN_MARK_MOUNT: Final = 0x00000010
#: struct fanotify_response.response
FAN_ALLOW: Final = 0x01
FANOTIFY_METADATA_VERSION: Final = 3
#: struct fanotify_event_metadata: __u32 event_len; __u8 vers, reserved; __u16 metadata_len;
#: __aligned_u64 mask; __s32 fd; __s32 pid.
_METADATA: Final = struct.Struct("=IBBHQii")
#: struct fanotify_response: __s32 fd; __u32 response. The kernel takes one per write().
_RESPONSE: Final = struct.Struct("=iI")
FAN_NOFD: Final = -1
AT_FDCWD: Final = -100
#: Every bit that makes the opener wait for an answer.
PERMISSION_EVENTS: Final = FanMask.FAN_OPEN_PERM | FanMask.FAN_ACCESS_PERM | FanMask.FAN_OPEN_EXEC_PERM
#: What both groups count: opens and reads, of directories too (listing a directory is a read).
COUNTED_EVENTS: Final = FanMask.FAN_OPEN | FanMask.FAN_ACCESS | FanMask.FAN_ONDIR
#: The event fds are only ever resolved to a path, never read. O_NONBLOCK: the kernel opens the
#: file *for us* with these flags, and a FIFO opened without it would wait for a writer — with
#: a permission event outstanding, the opener would wait too.
EVENT_FLAGS: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_LARGEFILE", 0)

_libc: ctypes.CDLL | None
try:
    # The running program's own symbols: Python is linked against the C library, and unlike
    # ctypes.util.find_library this starts no ldconfig subprocess.
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - a platform without a C library by that name: fails on use
    _libc = None


class FanotifyUnavailable(OSError):  # noqa: N818 - says what happened, like FileNotFoundError
    """fanotify cannot be used here (no CAP_SYS_ADMIN, no syscall); the message says which."""


class Event(NamedTuple):
    """One event as read, converted at the boundary. ``pid`` is the opener's process (tgid).

    A named tuple, not an attrs class: tens of thousands are made a second, on the path that
    keeps openers waiting.
    """

    mask: int
    fd: int
    pid: int

    @property
    def needs_answer(self) -> bool:
        """Whether the opener waits for :func:`allow` (a permission event)."""
        return bool(self.mask & PERMISSION_EVENTS)


def _functions() -> tuple[Any, Any]:
    init = getattr(_libc, "fanotify_init", None)
    mark = getattr(_libc, "fanotify_mark", None)
    if init is None or mark is None:
        raise FanotifyUnavailable(errno.ENOSYS, "fanotify unavailable: the C library has no fanotify_init")
    init.restype = ctypes.c_int
    init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    mark.restype = ctypes.c_int
    mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    return init, mark


def open_group(*, permission: bool) -> int:
    """A new group's fd (non-blocking, close-on-exec, unlimited queue), or :class:`FanotifyUnavailable`.

    ``permission=True`` asks for ``FAN_CLASS_CONTENT``, which a kernel built without
    ``CONFIG_FANOTIFY_ACCESS_PERMISSIONS`` refuses with ``EINVAL``.
    """
    init, _ = _functions()
    klass = FAN_CLASS_CONTENT if permission else FAN_CLASS_NOTIF
    fd: int = init(klass | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE, EVENT_FLAGS)
    if fd < 0:
        err = ctypes.get_errno()
        why = "needs CAP_SYS_ADMIN" if err == errno.EPERM else os.strerror(err)
        name = "FAN_CLASS_CONTENT" if permission else "FAN_CLASS_NOTIF"
        raise FanotifyUnavailable(err, f"fanotify unavailable: fanotify_init({name}) failed ({why}); "
                                       "inotify alone cannot name a reader")
    return fd


def mark_mount(fd: int, path: str, mask: int) -> None:
    """Add ``mask`` for the whole mount holding ``path`` to group ``fd``, or raise :class:`FanotifyUnavailable`.

    procfs, for one, refuses permission events on its mounts (``EINVAL``).
    """
    _, mark = _functions()
    if mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, AT_FDCWD, os.fsencode(path)) != 0:
        err = ctypes.get_errno()
        raise FanotifyUnavailable(err, f"fanotify unavailable: fanotify_mark on the mount failed "
                                       f"({os.strerror(err)})")


def mark_file(fd: int, path: str, mask: int) -> None:
    """Add ``mask`` for the one inode at ``path`` (its final component followed) to group ``fd``, or raise
    :class:`FanotifyUnavailable`."""
    _, mark = _functions()
    if mark(fd, FAN_MARK_ADD, mask, AT_FDCWD, os.fsencode(path)) != 0:
        err = ctypes.get_errno()
        raise FanotifyUnavailable(err, f"fanotify unavailable: fanotify_mark on {path!r} failed ({os.strerror(err)})")


def parse(buf: bytes) -> list[Event]:
    """The events in one ``read()`` of a group fd."""
    events = []
    offset = 0
    while offset + _METADATA.size <= len(buf):
        length, vers, _, _, mask, fd, pid = _METADATA.unpack_from(buf, offset)
        if vers != FANOTIFY_METADATA_VERSION:
            raise OSError(errno.EPROTO, f"fanotify metadata version {vers}, expected {FANOTIFY_METADATA_VERSION}")
        offset += max(length, _METADATA.size)
        events.append(Event(mask, fd, pid))
    return events


def allow(group_fd: int, event_fd: int) -> None:
    """Let the opener of a permission event proceed. ``ENOENT`` (the opener was killed meanwhile
    and the kernel withdrew the event) is not an error: nobody waits any more."""
    try:
        os.write(group_fd, _RESPONSE.pack(event_fd, FAN_ALLOW))
    except FileNotFoundError:
        return


def path_of(event_fd: int) -> str:
    """The path the opener used, as the kernel resolves the event's fd ("" when it cannot)."""
    try:
        return os.readlink(f"/proc/self/fd/{event_fd}")
    except OSError:
        return ""

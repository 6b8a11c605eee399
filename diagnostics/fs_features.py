"""What a filesystem takes beyond modes and times, found by experiment (root; used by ``fs_matrix.py``).

Each probe tries the real operation on a fresh file and records ``yes`` or the errno name the kernel
answered, never a guess from the filesystem's name: set ``user.x`` and ``trusted.x``, a POSIX access
ACL, write a file with a hole and look for it with ``SEEK_HOLE``, and set each restorable inode
flag (``chattr`` S and d on a file, D on a directory) and read it back.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

from artifactkit.metadata.extended import data_extents
from artifactkit.metadata.flags import FLAG_LETTERS, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, InodeFlag
from artifactkit.metadata.render import acl_bytes

#: The keys of a features row, in table order.
FEATURES: Final = ("user_xattr", "trusted_xattr", "acl", "seek_hole", "flags")
_ACL: Final = "u::rw-,u:1234:r--,g::r--,m::r--,o::---"
_HOLE_AT: Final = 1 << 20
_INT: Final = struct.Struct("=i")
#: (flag, on a directory?) for each flag a download restores.
_RESTORABLE: Final = ((InodeFlag.FS_SYNC_FL, False), (InodeFlag.FS_NODUMP_FL, False),
                      (InodeFlag.FS_DIRSYNC_FL, True))


def _outcome(step: Callable[[], object]) -> str:
    try:
        step()
    except OSError as err:
        return errno.errorcode.get(err.errno or 0, str(err.errno))
    return "yes"


def _seek_hole(path: Path) -> str:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, 4 * _HOLE_AT)
        os.pwrite(fd, b"x" * 4096, _HOLE_AT)
        os.fsync(fd)  # xfs and btrfs report delayed-allocation data as data only once it is allocated
        runs = data_extents(fd, 4 * _HOLE_AT)
    finally:
        os.close(fd)
    return "yes" if runs else "no (whole file reads as data)"


def _settable_flags(directory: Path) -> str:
    """The letters of the restorable flags this filesystem keeps, then each refused one with its errno."""
    kept, refused = [], []
    for flag, on_dir in _RESTORABLE:
        path = directory / f"flag-{int(flag):x}"
        if on_dir:
            path.mkdir()
        else:
            path.write_bytes(b"")
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            # The whole word, unknown bits included: ext4's EXTENTS bit must not be cleared on the way.
            current = _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, _INT.pack(0)))[0]
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, _INT.pack(current | int(flag)))
            after = _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, _INT.pack(0)))[0]
            if after & flag:
                kept.append(FLAG_LETTERS[flag])
                fcntl.ioctl(fd, FS_IOC_SETFLAGS, _INT.pack(after & ~int(flag)))
            else:
                refused.append(f"{FLAG_LETTERS[flag]}: not kept")
        except OSError as err:
            refused.append(f"{FLAG_LETTERS[flag]}: {errno.errorcode.get(err.errno or 0, str(err.errno))}")
        finally:
            os.close(fd)
        if on_dir:
            path.rmdir()
        else:
            path.unlink()
    shown = " ".join(kept) or "none"
    return shown + (f" ({', '.join(refused)})" if refused else "")


def probe_features(directory: Path) -> dict[str, str]:
    """One row of the extended-metadata table for the filesystem holding ``directory``."""
    path = directory / "features"
    path.write_bytes(b"")
    try:
        found = {
            "user_xattr": _outcome(lambda: os.setxattr(path, "user.x", b"1")),
            "trusted_xattr": _outcome(lambda: os.setxattr(path, "trusted.x", b"1")),
            "acl": _outcome(lambda: os.setxattr(path, "system.posix_acl_access", acl_bytes(_ACL))),
        }
    finally:
        path.unlink()
    found["seek_hole"] = _seek_hole(directory / "sparse")
    (directory / "sparse").unlink()
    found["flags"] = _settable_flags(directory)
    return found

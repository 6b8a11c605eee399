"""FIEMAP (``FS_IOC_FIEMAP``): which extents of a file the filesystem reports as shared (reflinked)."""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Final

FS_IOC_FIEMAP: Final = 0xC020660B
FIEMAP_FLAG_SYNC: Final = 0x1
FIEMAP_EXTENT_LAST: Final = 0x1
FIEMAP_EXTENT_SHARED: Final = 0x2000
_HEAD: Final = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT: Final = struct.Struct("=QQQQQI12x")  # fe_logical, fe_physical, fe_length, reserved64[2], fe_flags, reserved
_MAX: Final = 256


def extents(path: str | os.PathLike[str]) -> list[tuple[int, int, int]]:
    """``(logical offset, length, flags)`` of every extent of ``path`` (after a sync of its dirty pages)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        request = bytearray(_HEAD.pack(0, 2**64 - 1, FIEMAP_FLAG_SYNC, 0, _MAX, 0) + bytes(_EXTENT.size * _MAX))
        fcntl.ioctl(fd, FS_IOC_FIEMAP, request)
    finally:
        os.close(fd)
    mapped = _HEAD.unpack_from(request)[3]
    found = []
    for index in range(mapped):
        logical, _physical, length, _r1, _r2, flags = _EXTENT.unpack_from(request, _HEAD.size + index * _EXTENT.size)
        found.append((logical, length, flags))
    return found


def shared_bytes(path: str | os.PathLike[str]) -> int:
    """How many bytes of ``path`` lie in extents the filesystem reports as shared."""
    return sum(length for _, length, flags in extents(path) if flags & FIEMAP_EXTENT_SHARED)

"""Reading what ``lstat`` does not show: extended attributes, a file's data layout, its inode flags.

Each reader is one syscall in the common case — one ``llistxattr`` for an entry with no xattrs, one
``SEEK_HOLE`` for a dense file, one ``FS_IOC_GETFLAGS`` on an fd the caller already holds — and none
of them reads content or follows a link, so they run in the capture phase, before any read.
"""

from __future__ import annotations

import errno
import os
from typing import Final

from artifactkit._os_calls import named
from artifactkit.metadata.flags import get_flags_int
from artifactkit.metadata.model import Extents, Xattrs

#: ``listxattr`` unsupported here (ramfs has no xattr handlers for user.*): nothing to record.
_NO_XATTRS: Final = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP})
#: xfs shows a privileged reader its on-disk POSIX ACLs a second time under these trusted.* names
#: (fs/xfs/xfs_xattr.c keeps them for IRIX compatibility). They are the same bytes as
#: ``system.posix_acl_access/default`` in another encoding: recording both would restore the ACL twice
#: and call every other filesystem's copy "missing" one.
_ALIASES: Final = frozenset({"trusted.SGI_ACL_FILE", "trusted.SGI_ACL_DEFAULT"})


def read_xattrs(target: str | int) -> Xattrs:
    """Every extended attribute of a path itself (never through a link) or of an open fd, by name.

    ``trusted.*`` names are listed only to a privileged reader; what is not listed cannot be
    recorded, and a later comparison as root shows the difference.
    """
    follow = isinstance(target, int)  # an fd has no link to follow; a path's final link is never followed
    try:
        names = named("listxattr", os.listxattr, target, follow_symlinks=follow)
    except OSError as err:
        if err.errno in _NO_XATTRS:
            return ()
        raise
    if not names:
        return ()
    found = []
    for name in sorted(names):
        if name in _ALIASES:
            continue
        try:
            found.append((name, named("getxattr", os.getxattr, target, name, follow_symlinks=follow)))
        except OSError as err:
            if err.errno != errno.ENODATA:  # removed between the list and the read
                raise
    return tuple(found)


def data_extents(fd: int, size: int) -> Extents | None:
    """The data runs of a file with holes, or ``None`` for a dense one (one ``lseek`` to learn that).

    Filesystems without ``SEEK_HOLE`` report the whole file as data, which reads as dense: true to
    what they store.
    """
    if size == 0:
        return None
    try:
        first_hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError as err:
        if err.errno in (errno.EINVAL, errno.ENXIO, errno.EOPNOTSUPP):
            return None
        raise
    if first_hole >= size:
        return None
    runs = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:  # only a hole from here to the end
                break
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        runs.append((start, end - start))
        offset = end
    return tuple(runs)


def read_flags(fd: int, where: str) -> int | None:
    """The inode flags of an open fd, or ``None`` where the filesystem has none to report."""
    return get_flags_int(fd, where)

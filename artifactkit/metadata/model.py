"""The metadata model: :class:`FileMeta`, captured with ``lstat`` only, every time an integer of ns.

A float timestamp loses 100-250 ns at today's epoch, so no float ever holds a time here.
"""

from __future__ import annotations

import os
import stat
from typing import Final, Literal

import attrs

from artifactkit.errors import UnsupportedFileType

Kind = Literal["file", "dir", "symlink", "fifo", "char", "block"]
KINDS: tuple[Kind, ...] = ("file", "dir", "symlink", "fifo", "char", "block")
#: Kinds whose whole being is their inode: no content, no target, created by ``mkfifo``/``mknod``.
SPECIAL_KINDS: Final = frozenset({"fifo", "char", "block"})
#: Kinds that carry a device number (``rdev``, as major/minor).
DEVICE_KINDS: Final = frozenset({"char", "block"})
#: Kinds a hard link may join within a tree: all but a directory, which cannot have one (a symlink can: ``ln -P``
#: makes one, and ``cp -a`` keeps it).
LINKABLE_KINDS: Final = frozenset({"file", "symlink", "fifo", "char", "block"})
#: The file type bits (``S_IFMT``) of each kind.
KIND_IFMT: Final[dict[str, int]] = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK,
                                    "fifo": stat.S_IFIFO, "char": stat.S_IFCHR, "block": stat.S_IFBLK}
_KIND_OF_IFMT: Final[dict[int, Kind]] = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
                                         stat.S_IFIFO: "fifo", stat.S_IFCHR: "char", stat.S_IFBLK: "block"}

#: The path of a tree's root directory in every manifest and capture.
ROOT: Final = "."

#: Permission bits including setuid, setgid and sticky (the bits a restore must reproduce).
MODE_MASK = 0o7777

#: Extended attributes as recorded: ``(name, value)`` pairs sorted by name (hashable, unlike a dict).
Xattrs = tuple[tuple[str, bytes], ...]
#: Where a file holds data: ``(offset, length)`` runs; everything else up to ``size`` is a hole.
Extents = tuple[tuple[int, int], ...]
#: A device number as ``(major, minor)``: what ``ls -l`` shows and ``mknod`` takes, not the packed ``dev_t``.
Rdev = tuple[int, int]


@attrs.frozen
class FileMeta:
    """The metadata artifactkit preserves for one entry of a tree.

    ``path`` is relative POSIX (``"."`` for the tree's root). ``ctime_ns`` is context for
    diagnosis only (a ctime cannot be restored): it never takes part in equality or comparison.

    Everything ``cp -a`` keeps, and more, is recorded where it was read: ``uid``/``gid``; ``xattrs``
    (every name ``llistxattr`` returned: ``user.*``, ``trusted.*`` when privileged, ``security.*``
    including ``security.capability``, and the POSIX ACLs ``system.posix_acl_access/default``);
    ``hardlink`` (for the second and later names of one inode within the tree, the first name, in
    path order) and ``nlink``; ``extents`` (a file's data runs when it has holes; ``None`` when it is
    dense); ``flags`` (``FS_IOC_GETFLAGS``; ``None`` where none could be read, e.g. symlinks, FIFOs and
    devices, which are never opened); ``rdev`` (``(major, minor)`` of a ``char`` or ``block`` device,
    ``None`` for every other kind). A value of ``None`` means "not recorded" (a version-1 manifest, a
    corpus tree) and is never compared.
    """

    path: str
    kind: Kind
    mode: int
    mtime_ns: int
    atime_ns: int
    size: int = 0
    sha256: str | None = None
    target: str | None = None
    ctime_ns: int | None = attrs.field(default=None, eq=False, repr=False)
    uid: int | None = None
    gid: int | None = None
    xattrs: Xattrs | None = None
    hardlink: str | None = None
    nlink: int | None = attrs.field(default=None, eq=False, repr=False)
    extents: Extents | None = None
    flags: int | None = None
    rdev: Rdev | None = None


#: FileMeta's fields in declaration order: the hot paths construct it positionally, so the manifest's field table
#: (``manifest/fields.py``) pins it, row by row (``tests/test_house_manifest.py``).
FIELD_ORDER: Final = tuple(field.name for field in attrs.fields(FileMeta))


def kind_of(st_mode: int, path: str) -> Kind:
    """Map an ``st_mode`` to our kind, refusing sockets (a socket is a live endpoint, not data: no
    tool that copies trees can make one that works)."""
    kind = _KIND_OF_IFMT.get(stat.S_IFMT(st_mode))
    if kind is not None:
        return kind
    what = "a socket" if stat.S_ISSOCK(st_mode) else "a special file"
    raise UnsupportedFileType(
        f"{path!r} is {what}; artifacts hold files, directories, symlinks, FIFOs and device nodes",
        path=path, paths=[path])


def rdev_of(st: os.stat_result) -> Rdev:
    """The device number of a device inode, as ``(major, minor)``."""
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def meta_from_stat(relpath: str, st: os.stat_result, *, sha256: str | None = None,
                   target: str | None = None, owners: bool = False, xattrs: Xattrs | None = None) -> FileMeta:
    """Convert an ``os.stat_result`` (from ``lstat``) into a :class:`FileMeta` at the boundary.

    ``owners`` records ``uid``/``gid`` (a full capture); without it they stay unrecorded.
    """
    kind = kind_of(st.st_mode, relpath)
    # Positional, in FIELD_ORDER: sixteen keywords cost as much as the object itself (1.6 of 3.3 us), and
    # this runs once per entry of every publish.
    return FileMeta(relpath, kind, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_atime_ns,
                    st.st_size if kind == "file" else 0, sha256, target, st.st_ctime_ns,
                    st.st_uid if owners else None, st.st_gid if owners else None, xattrs, None, st.st_nlink, None,
                    None, rdev_of(st) if kind in DEVICE_KINDS else None)


def capture(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> FileMeta:
    """Capture one entry's metadata with ``lstat`` only: nothing here reads content or a link.

    ``root`` makes the recorded path relative to it (``"."`` for the root itself); content digests
    and link targets are filled in by callers *after* every capture, because reading moves atime.
    """
    full = os.fspath(path)
    st = os.lstat(full)
    relpath = full if root is None else os.path.relpath(full, os.fspath(root)).replace(os.sep, "/")
    return meta_from_stat(relpath, st)

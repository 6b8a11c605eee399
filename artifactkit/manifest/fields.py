"""The manifest's fields, one row each: what an entry of format 2 holds, under which JSON key, of which type and
bounds, on which kinds.

What follows from the table: which keys the writer puts in an entry and when (``encode._entry_doc``), which
fields a kind may not carry (:data:`KIND_FIELDS`, refused by the reader), what a hard link's names must share
(:data:`LINK_CONTENT`, :data:`LINK_INODE`), and the bounds every integer is read within. ``FileMeta`` is not
generated from it: it stays a declared attrs class in ``metadata/model.py`` (readable, typed for mypy, and the
model must not depend on the format above it); ``tests/test_house_manifest.py`` holds the rows to its attributes
in order (``FIELD_ORDER``), the writer's and the reader's fast paths to the rows, and the native core's own
table (``MANIFEST_FIELDS`` in the crate) to the keys and kinds here.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import attrs

from artifactkit.manifest.limits import RDEV_MAJOR_LIMIT, RDEV_MINOR_LIMIT, SIZE_LIMIT
from artifactkit.metadata.model import DEVICE_KINDS, KINDS, LINKABLE_KINDS, MODE_MASK

#: One past the latest time the kernel holds (``timespec64``: signed 64-bit seconds, 0..999,999,999 ns), and
#: minus the earliest. Not 64-bit ns: tmpfs and btrfs keep any second, xfs's bigtime runs to 2486, ext4 to 2446.
NS_LIMIT: Final = 2**63 * 1_000_000_000
#: One past the largest uid, gid and inode flags word (each a 32-bit integer in the kernel).
ID_LIMIT: Final = 2**32
SHA256_RE: Final = re.compile(r"[0-9a-f]{64}")
ALL_KINDS: Final = frozenset(KINDS)

#: How a value is written and read: ``int`` (a JSON integer), ``text`` (a string), ``kind`` (one of ``KINDS``),
#: ``sha256`` (64 lowercase hex digits), ``xattrs`` (``[[name, base64 value], ...]`` sorted by name), ``link``
#: (the path of an earlier name of the same inode), ``runs`` (``[[offset, length], ...]`` data runs), ``device``
#: (``[major, minor]``).
FieldType = Literal["int", "text", "kind", "sha256", "xattrs", "link", "runs", "device"]


@attrs.frozen
class Field:
    """One field of an entry: ``FileMeta``'s attribute ``name``, written under ``key`` (``None``: never written)."""

    name: str
    key: str | None
    type: FieldType
    #: The kinds that carry it: a manifest that gives it to another kind is refused.
    kinds: frozenset[str] = ALL_KINDS
    #: Left out of an entry while unrecorded (``None``; xattrs also when there are none), and read back as
    #: unrecorded where absent. Not optional: written for every kind that carries it, and required there.
    #: ``rdev`` is optional to the writer but required of a device by the reader (``mknod`` needs it).
    optional: bool = False
    #: ``[low, high)`` of each integer in the value (one for an ``int``, two for a ``device``).
    bounds: tuple[tuple[int, int], ...] = ()
    #: Out of bounds: refused (an :class:`IntegrityError`), or dropped (context for a diagnosis, never restored).
    refused: bool = True
    #: What every name of one hard-linked inode shares: its ``content`` (checked equal first), its ``inode``
    #: metadata (each field named in the refusal).
    shared_by_links: Literal["content", "inode"] | None = None


_TIME: Final = ((-NS_LIMIT, NS_LIMIT),)
_ID: Final = ((0, ID_LIMIT),)
FILE: Final = frozenset({"file"})

#: Every field of ``FileMeta``, in its order (``model.FIELD_ORDER``).
FIELDS: Final = (
    Field("path", "path", "text"),
    Field("kind", "kind", "kind"),
    Field("mode", "mode", "int", bounds=((0, MODE_MASK + 1),), shared_by_links="inode"),
    Field("mtime_ns", "mtime_ns", "int", bounds=_TIME, shared_by_links="inode"),
    Field("atime_ns", "atime_ns", "int", bounds=_TIME, shared_by_links="inode"),
    Field("size", "size", "int", kinds=FILE, bounds=((0, SIZE_LIMIT),), shared_by_links="content"),
    Field("sha256", "sha256", "sha256", kinds=FILE, shared_by_links="content"),
    Field("target", "target", "text", kinds=frozenset({"symlink"}), shared_by_links="content"),
    Field("ctime_ns", "source_ctime_ns", "int", optional=True, bounds=_TIME, refused=False),
    Field("uid", "uid", "int", optional=True, bounds=_ID, shared_by_links="inode"),
    Field("gid", "gid", "int", optional=True, bounds=_ID, shared_by_links="inode"),
    Field("xattrs", "xattrs", "xattrs", optional=True, shared_by_links="inode"),
    Field("hardlink", "hardlink", "link", kinds=LINKABLE_KINDS, optional=True),
    Field("nlink", None, "int", optional=True),  # the link count: context a capture keeps, never in a manifest
    Field("extents", "extents", "runs", kinds=FILE, optional=True, shared_by_links="inode"),
    Field("flags", "flags", "int", kinds=frozenset({"file", "dir"}), optional=True, bounds=_ID,
          shared_by_links="inode"),
    Field("rdev", "rdev", "device", kinds=DEVICE_KINDS, optional=True,
          bounds=((0, RDEV_MAJOR_LIMIT), (0, RDEV_MINOR_LIMIT)), shared_by_links="content"),
)

#: The fields a manifest writes, by key, in ``FileMeta``'s order.
WRITTEN: Final = tuple((field.key, field) for field in FIELDS if field.key is not None)
#: The fields only some kinds carry, by key, refused on any other kind after the entry's own checks. A hard
#: link's first name and a device number are refused on another kind where they are read (``hardlink`` must
#: name an earlier entry, ``rdev`` is required of a device), each with its own message.
KIND_FIELDS: Final = {key: field.kinds for key, field in WRITTEN
                      if field.kinds != ALL_KINDS and field.type not in ("link", "device")}
#: What a later name of a hard link must share with its first name: the same content, then the same inode.
LINK_CONTENT: Final = tuple(field.name for field in FIELDS if field.shared_by_links == "content")
LINK_INODE: Final = frozenset(field.name for field in FIELDS if field.shared_by_links == "inode")


def field_of_type(kind: FieldType) -> Field:
    """The one field of the type ``kind`` (``"device"``, ``"link"``...): its reader takes the key from the row."""
    (field,) = (field for field in FIELDS if field.type == kind)
    return field

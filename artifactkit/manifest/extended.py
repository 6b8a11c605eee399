"""Reading the manifest/2 fields beyond modes and times: owners, xattrs, hard links, holes, inode flags, devices.

Written (``encode.py``) so a person can still read the JSON: xattr values in base64 (they are bytes), holes as
``[offset, length]`` data runs, a hard link as the path of its first name. Read back with the same
suspicion as every other field: a forged value is an :class:`IntegrityError`, never a crash.
"""

from __future__ import annotations

import binascii
import operator
import os
from collections.abc import Iterable
from typing import Any, Final

from artifactkit.errors import IntegrityError, ManifestLimitError
from artifactkit.manifest.fields import ID_LIMIT, KIND_FIELDS, LINK_CONTENT, field_of_type
from artifactkit.manifest.limits import (
    MAX_EXTENTS,
    XATTR_LIST_MAX,
    XATTR_NAME_MAX,
    XATTR_SIZE_MAX,
    show,
)
from artifactkit.metadata.model import LINKABLE_KINDS, Extents, FileMeta, Xattrs

#: The longest base64 text of a value of XATTR_SIZE_MAX bytes: longer is refused before it is decoded.
_B64_MAX: Final = (XATTR_SIZE_MAX + 2) // 3 * 4


def too_many_runs(path: str, count: int) -> ManifestLimitError:
    """A file of ``count`` data runs, more than any manifest may list (raised by the native encoder too)."""
    return ManifestLimitError(
        f"{path!r} has {count} data runs (holes between them), more than the {MAX_EXTENTS} a manifest may list: "
        "no download could read this version", path=path, limit=MAX_EXTENTS, actual=count, setting=None)


def _bad(where: str, path: object, what: str) -> IntegrityError:
    return IntegrityError(f"{where}: entry {show(path)} has {what}", path=where)


def _int(raw: dict[str, Any], key: str, high: int, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < high:
        raise _bad(where, raw.get("path"), f"invalid {key} {show(value)}")
    return value


#: ``(uid, gid, xattrs, hardlink, extents, flags)`` of one entry.
ExtendedFields = tuple[int | None, int | None, Xattrs | None, str | None, Extents | None, int | None]


def extended_fields(raw: dict[str, Any], path: str, kind: str, size: int, *, where: str) -> ExtendedFields:
    """The validated ``(uid, gid, xattrs, hardlink, extents, flags)`` of an entry's JSON object: the
    parser builds each entry once from these (an ``evolve`` per entry cost a third of a download's parse)."""
    # The usual file entry never gets here: parse_entry checks it inline.
    uid, gid, flags = _int(raw, "uid", ID_LIMIT, where), _int(raw, "gid", ID_LIMIT, where), \
        _int(raw, "flags", ID_LIMIT, where)
    if (uid is None) != (gid is None):
        # Restored with one fchown, read back as a pair: half an owner was restored by one engine, an internal
        # error on the other, and a gid alone was dropped while the download said "verified exact".
        raise _bad(where, path, f"a {'uid without a gid' if gid is None else 'gid without a uid'}: an owner is "
                                "recorded whole or not at all")
    xattrs = None
    if "xattrs" in raw or uid is not None:
        xattrs = _xattrs(raw.get("xattrs", []), path, where)
    hardlink = raw.get("hardlink")
    if hardlink is not None and (kind not in LINKABLE_KINDS or not isinstance(hardlink, str)):
        raise _bad(where, path, f"invalid hardlink {show(hardlink)}")
    extents = None
    if raw.get("extents") is not None:
        extents = _extents(raw["extents"], size, path, where)
    for field, kinds in KIND_FIELDS.items():
        if kind not in kinds and raw.get(field) is not None:
            raise _bad(where, path, f"{field} {show(raw[field])}, which a {kind} does not have")
    return uid, gid, xattrs, hardlink, extents, flags


#: The device number's row: a device entry requires it, every other kind refuses it (``mknod`` needs one; no
#: other kind has one).
_DEVICE: Final = field_of_type("device")
_DEVICE_KEY: Final = str(_DEVICE.key)
_MAJOR_LIMIT, _MINOR_LIMIT = (high for _, high in _DEVICE.bounds)


def device_number(raw: dict[str, Any], path: str, kind: str, *, where: str) -> tuple[int, int] | None:
    """The ``[major, minor]`` of a device entry (required), ``None`` for every other kind (which has none)."""
    value = raw.get(_DEVICE_KEY)
    if kind not in _DEVICE.kinds:
        if value is not None:
            raise _bad(where, path, f"a device number {show(value)}, which a {kind} does not have")
        return None
    if not (type(value) is list and len(value) == 2 and type(major := value[0]) is int
            and type(minor := value[1]) is int and 0 <= major < _MAJOR_LIMIT and 0 <= minor < _MINOR_LIMIT):
        raise _bad(where, path, f"an invalid device number {show(value)} (want [major < {_MAJOR_LIMIT}, "
                                f"minor < {_MINOR_LIMIT}])")
    return major, minor


def _xattrs(value: object, path: str, where: str) -> tuple[tuple[str, bytes], ...]:
    """The xattrs a real file could have: names and values within the kernel's limits (checked before a
    value is decoded), sorted and unique."""
    if not isinstance(value, list):
        raise _bad(where, path, "an xattr list that is not a list")
    found, listed = [], 0
    for item in value:
        # type() rather than isinstance and all(...): JSON makes no subclasses, and this runs per xattr.
        if not (type(item) is list and len(item) == 2 and type(name := item[0]) is str
                and type(text := item[1]) is str and "." in name and "\x00" not in name):
            raise _bad(where, path, f"a malformed xattr {show(item)}")
        try:
            # isascii is a flag test, fsencode a copy: the usual name is ASCII and its length its bytes.
            name_bytes = len(name) if name.isascii() else len(os.fsencode(name))
        except UnicodeEncodeError as err:  # a lone surrogate: the bytes of no name
            raise _bad(where, path, f"an xattr name {show(name)} that no file could have") from err
        listed += name_bytes + 1  # listxattr(2) returns the names NUL-terminated
        if name_bytes > XATTR_NAME_MAX or len(text) > _B64_MAX or listed > XATTR_LIST_MAX:
            raise _bad(where, path, f"xattr {show(name)} past the kernel's limits (names {XATTR_NAME_MAX} bytes, "
                                    f"values {XATTR_SIZE_MAX}, all names {XATTR_LIST_MAX})")
        try:
            # What b64decode(validate=True) accepts (held equal by test_manifest_encoding), without its
            # Python-level regex: half the cost of each xattr.
            data = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError) as err:
            raise _bad(where, path, f"xattr {show(name)} whose value is not base64") from err
        if len(data) > XATTR_SIZE_MAX:
            raise _bad(where, path, f"xattr {show(name)} of {len(data)} bytes; the kernel stores at most "
                                    f"{XATTR_SIZE_MAX}")
        found.append((name, data))
    names = [name for name, _ in found]
    if names != sorted(set(names)):
        raise _bad(where, path, "xattrs out of order or repeated")
    return tuple(found)


def _extents(value: object, size: int, path: str, where: str) -> tuple[tuple[int, int], ...]:
    """Data runs that say the same as the size: sorted, disjoint, non-empty, inside it (so they sum to at
    most it), and at most MAX_EXTENTS of them."""
    if not isinstance(value, list):
        raise _bad(where, path, "extents that are not a list")
    if len(value) > MAX_EXTENTS:
        raise ManifestLimitError(f"{where}: entry {show(path)} has {len(value)} extents (data runs), more than the "
                                 f"{MAX_EXTENTS} a manifest may list", path=where, limit=MAX_EXTENTS,
                                 actual=len(value), setting=None)
    runs, end = [], 0
    for item in value:
        if not (type(item) is list and len(item) == 2 and type(item[0]) is int and type(item[1]) is int):
            raise _bad(where, path, f"a malformed extent {show(item)}")
        start, length = item
        if start < end:
            raise _bad(where, path, f"an extent {show(item)} that starts before the previous one ends at {end}")
        if length <= 0 or start + length > size:
            raise _bad(where, path, f"an extent {show(item)} that is empty or ends past its size {size}")
        runs.append((start, length))
        end = start + length
    return tuple(runs)


#: What a hard link's later name shares with its first name beyond content (``fields.LINK_INODE``, in the order a
#: refusal looks for the one that differs): one inode has one of each. The writer records every name's own
#: capture (the scan gives later names their first name's), so they agree.
INODE_FIELDS: Final = ("mode", "uid", "gid", "mtime_ns", "atime_ns", "xattrs", "flags", "extents")
_inode: Final = operator.attrgetter(*INODE_FIELDS)
_content: Final = operator.attrgetter(*LINK_CONTENT)


def check_hardlinks(entries: Iterable[FileMeta], *, where: str) -> None:
    """Every second name of a hard link names an earlier first name of the same kind with the same content
    (for a symlink, the same target; for a device, the same device number): one inode cannot be two things.
    Nor can it have two modes, owners, times, xattr sets, flags or hole maps: a later name claiming another
    than its first name's is refused naming both and the field (a restore makes one inode, so one of the two
    claims would be dropped while the download said "verified exact")."""
    by_path = {entry.path: entry for entry in entries}
    for entry in by_path.values():
        if entry.hardlink is None:
            continue
        first = by_path.get(entry.hardlink)
        if (first is None or first.kind != entry.kind or first.hardlink is not None or first.path >= entry.path
                or _content(first) != _content(entry)):
            raise IntegrityError(f"{where}: entry {show(entry.path)} is a hard link to {show(entry.hardlink)}, which "
                                 f"is not an earlier {entry.kind} of this manifest with the same content", path=where)
        if _inode(entry) == _inode(first):  # 0.9 us a later name; the field is looked for only when one differs
            continue
        for field in INODE_FIELDS:
            if (claimed := getattr(entry, field)) != (held := getattr(first, field)):
                raise IntegrityError(
                    f"{where}: entry {show(entry.path)} is a hard link to {show(first.path)} but claims another "
                    f"{field} ({_claim(field, claimed)}, not {_claim(field, held)}): one inode has one", path=where)


def _claim(field: str, value: Any) -> str:
    """A field's value in a hard link's refusal: a mode in octal, an xattr set by its names (a value may be
    64 KiB), anything else shortened by :func:`show`."""
    if field == "mode":
        return f"{value:#o}"
    if field == "xattrs" and value:
        return show([name for name, _ in value])
    return show(list(value) if isinstance(value, tuple) else value)

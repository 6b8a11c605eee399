"""The manifest/2 fields beyond modes and times: owners, xattrs, hard links, holes, inode flags.

Encoded so a person can still read the JSON: xattr values in base64 (they are bytes), holes as
``[offset, length]`` data runs, a hard link as the path of its first name. Decoded with the same
suspicion as every other field: a forged value is an :class:`IntegrityError`, never a crash.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any, Final

from artifactkit.errors import IntegrityError
from artifactkit.metadata.model import Extents, FileMeta, Xattrs

_ID_LIMIT: Final = 2**32
_SIZE_LIMIT: Final = 2**62


def encode_extended(entry: FileMeta, doc: dict[str, Any]) -> dict[str, Any]:
    """Add the recorded extended fields of ``entry`` to its JSON object (unrecorded ones are left out)."""
    if entry.uid is not None:
        doc["uid"] = entry.uid
    if entry.gid is not None:
        doc["gid"] = entry.gid
    if entry.xattrs:
        doc["xattrs"] = [[name, base64.b64encode(value).decode("ascii")] for name, value in entry.xattrs]
    if entry.hardlink is not None:
        doc["hardlink"] = entry.hardlink
    if entry.extents is not None:
        doc["extents"] = [list(run) for run in entry.extents]
    if entry.flags is not None:
        doc["flags"] = entry.flags
    return doc


def _bad(where: str, path: object, what: str) -> IntegrityError:
    return IntegrityError(f"{where}: entry {path!r} has {what}", path=where)


def _int(raw: dict[str, Any], key: str, high: int, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < high:
        raise _bad(where, raw.get("path"), f"invalid {key} {value!r}")
    return value


#: ``(uid, gid, xattrs, hardlink, extents, flags)`` of one entry.
ExtendedFields = tuple[int | None, int | None, Xattrs | None, str | None, Extents | None, int | None]


def extended_fields(raw: dict[str, Any], path: str, kind: str, size: int, *, where: str) -> ExtendedFields:
    """The validated ``(uid, gid, xattrs, hardlink, extents, flags)`` of an entry's JSON object: the
    parser builds each entry once from these (an ``evolve`` per entry cost a third of a download's parse)."""
    # The usual file entry never gets here: parse_entry checks it inline.
    uid, gid, flags = _int(raw, "uid", _ID_LIMIT, where), _int(raw, "gid", _ID_LIMIT, where), \
        _int(raw, "flags", _ID_LIMIT, where)
    xattrs = None
    if "xattrs" in raw or uid is not None:
        xattrs = _xattrs(raw.get("xattrs", []), path, where)
    hardlink = raw.get("hardlink")
    if hardlink is not None and (kind != "file" or not isinstance(hardlink, str)):
        raise _bad(where, path, f"invalid hardlink {hardlink!r}")
    extents = None
    if raw.get("extents") is not None:
        extents = _extents(raw["extents"], size, path, where)
    return uid, gid, xattrs, hardlink, extents, flags


def _xattrs(value: object, path: str, where: str) -> tuple[tuple[str, bytes], ...]:
    if not isinstance(value, list):
        raise _bad(where, path, "an xattr list that is not a list")
    found = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
                and "." in item[0] and "\x00" not in item[0]):
            raise _bad(where, path, f"a malformed xattr {item!r}")
        try:
            found.append((item[0], base64.b64decode(item[1], validate=True)))
        except (binascii.Error, ValueError) as err:
            raise _bad(where, path, f"xattr {item[0]!r} whose value is not base64") from err
    names = [name for name, _ in found]
    if names != sorted(set(names)):
        raise _bad(where, path, "xattrs out of order or repeated")
    return tuple(found)


def _extents(value: object, size: int, path: str, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise _bad(where, path, "extents that are not a list")
    runs, end = [], 0
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item)):
            raise _bad(where, path, f"a malformed extent {item!r}")
        start, length = item
        if start < end or length <= 0 or start + length > size or start + length >= _SIZE_LIMIT:
            raise _bad(where, path, f"an extent {item!r} out of order or outside its {size} bytes")
        runs.append((start, length))
        end = start + length
    return tuple(runs)


def check_hardlinks(entries: Iterable[FileMeta], *, where: str) -> None:
    """Every second name of a hard link names a first name that is a file with the same content."""
    by_path = {entry.path: entry for entry in entries}
    for entry in by_path.values():
        if entry.hardlink is None:
            continue
        first = by_path.get(entry.hardlink)
        if (first is None or first.kind != "file" or first.hardlink is not None or first.path >= entry.path
                or (first.sha256, first.size) != (entry.sha256, entry.size)):
            raise IntegrityError(f"{where}: entry {entry.path!r} is a hard link to {entry.hardlink!r}, which is "
                                 "not an earlier file of this manifest with the same content", path=where)

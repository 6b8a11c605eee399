"""Reading a manifest back: untrusted bytes validated field by field into :class:`Manifest` entries."""

from __future__ import annotations

import os
from typing import Any, Final

from artifactkit.errors import IntegrityError, UnsafePathError
from artifactkit.manifest.encode import FORMAT, READABLE_FORMATS, Manifest
from artifactkit.manifest.extended import check_hardlinks, device_number, extended_fields
from artifactkit.manifest.fields import NS_LIMIT, SHA256_RE
from artifactkit.manifest.limits import (
    SIZE_LIMIT,
    TARGET_MAX,
    check_file_sizes,
    clip,
    decode_manifest,
    file_size_limit,
    may_hold_surrogates,
    show,
)
from artifactkit.manifest.paths import check_artifact_name, check_tree_shape
from artifactkit.metadata.model import KINDS, MODE_MASK, FileMeta


def parse_manifest(data: bytes, *, where: str) -> Manifest:
    """Parse and validate untrusted manifest bytes; any defect raises a named error, never a KeyError.

    Bounded work for any input: nesting, sizes, data runs and xattrs are held to the bounds documented in
    ``manifest.limits``, and every message quotes a hostile value shortened.
    """
    size_limit = file_size_limit()  # a setting that is no limit is refused before the bytes are looked at
    doc = decode_manifest(data, where=where)
    if not isinstance(doc, dict):
        raise IntegrityError(f"{where}: manifest is not a JSON object", path=where)
    form = doc.get("format")
    if type(form) is not str or form not in READABLE_FORMATS:
        raise IntegrityError(f"{where}: unknown manifest format {show(form)}, expected {FORMAT!r}", path=where)
    raw_entries = doc.get("entries")
    if not isinstance(raw_entries, list):
        raise IntegrityError(f"{where}: manifest has no entry list", path=where)
    entries = tuple(parse_entry(raw, where=where) for raw in raw_entries)
    check_file_sizes(entries, size_limit, where=where)
    if may_hold_surrogates(data):
        _check_encodable(entries, where=where)
    try:
        check_tree_shape(entries, where=where)
    except UnsafePathError as err:
        if clip(err.message) == err.message:
            raise
        raise UnsafePathError(clip(err.message), **err.context) from err  # it quoted a hostile path whole
    check_hardlinks(entries, where=where)
    name = doc.get("name")
    try:
        check_artifact_name(name)
    except UnsafePathError as err:
        raise IntegrityError(f"{where}: {clip(str(err))}", path=where) from err
    noatime = doc.get("source_read_noatime", True)
    if not isinstance(noatime, bool):
        raise IntegrityError(f"{where}: source_read_noatime must be a boolean", path=where)
    return Manifest(name=str(name), entries=entries, source_read_noatime=noatime)


def _check_encodable(entries: tuple[FileMeta, ...], *, where: str) -> None:
    """Every path must encode back to the bytes of a name (``os.fsencode``): a lone surrogate such as
    ``\\ud800`` is no filesystem's name, and would fail the download with a UnicodeEncodeError."""
    for entry in entries:
        try:
            os.fsencode(entry.path)
        except UnicodeEncodeError as err:
            raise UnsafePathError(f"{where}: entry path {show(entry.path)} holds a lone surrogate, which no "
                                  "file name can", path=entry.path) from err


def _int_field(raw: dict[str, Any], key: str, *, where: str, low: int, high: int) -> int:
    value = raw.get(key)
    if type(value) is not int or not low <= value < high:
        raise IntegrityError(f"{where}: entry {show(raw.get('path'))} has invalid {key} {show(value)}", path=where)
    return value


#: The keys of the usual file entry (what file_line writes, flags recorded).
_FILE_KEYS: Final = frozenset({"atime_ns", "flags", "gid", "kind", "mode", "mtime_ns", "path", "sha256", "size",
                               "source_ctime_ns", "uid"})


def parse_entry(raw: object, *, where: str) -> FileMeta:
    """One entry's JSON object, validated field by field.

    The usual file entry (exactly the keys :func:`file_line` writes) is checked inline, every field as
    :func:`parse_entry_in_full` checks it; anything else, valid or not, goes there (a ``get`` and a
    call per field were half of a 10,000-entry parse, all of it before a download can start).
    """
    if type(raw) is dict and raw.keys() == _FILE_KEYS and raw["kind"] == "file":
        path, mode, mtime, atime, size, sha = raw["path"], raw["mode"], raw["mtime_ns"], raw["atime_ns"], \
            raw["size"], raw["sha256"]
        uid, gid, flags, ctime = raw["uid"], raw["gid"], raw["flags"], raw["source_ctime_ns"]
        if (type(path) is str and type(mode) is int and 0 <= mode <= MODE_MASK
                and type(mtime) is int and -2**63 * 10**9 <= mtime < 2**63 * 10**9
                and type(atime) is int and -2**63 * 10**9 <= atime < 2**63 * 10**9
                and type(size) is int and 0 <= size < 2**63
                and type(sha) is str and SHA256_RE.fullmatch(sha) and type(uid) is int and 0 <= uid < 2**32
                and type(gid) is int and 0 <= gid < 2**32 and type(flags) is int and 0 <= flags < 2**32):
            # Positional (model.FIELD_ORDER): the keywords cost as much as the object, once per entry.
            # 2**63 is SIZE_LIMIT, 2**63 * 10**9 NS_LIMIT, as literals (folded when compiled): a global lookup per
            # entry is measurable.
            return FileMeta(path, "file", mode, mtime, atime, size, sha, None,
                            ctime if type(ctime) is int and -2**63 * 10**9 <= ctime < 2**63 * 10**9 else None,
                            uid, gid, (), None, None, None, flags)
    return parse_entry_in_full(raw, where=where)


def parse_entry_in_full(raw: object, *, where: str) -> FileMeta:
    """One entry's JSON object, validated field by field, any shape; a defect is a named error."""
    if not isinstance(raw, dict):
        raise IntegrityError(f"{where}: manifest entry {show(raw)} is not an object", path=where)
    path = raw.get("path")
    if not isinstance(path, str):
        raise UnsafePathError(f"{where}: entry path {show(path)} is not a string", path=show(path))
    kind = raw.get("kind")
    if kind not in KINDS:
        raise IntegrityError(f"{where}: entry {show(path)} has unknown kind {show(kind)}", path=where)
    mode, mtime_ns, atime_ns = raw.get("mode"), raw.get("mtime_ns"), raw.get("atime_ns")
    # The usual entry passes these three checks inline (a call each cost a tenth of a download's parse);
    # anything else goes through _int_field, which names the field at fault.
    if not (type(mode) is int and 0 <= mode <= MODE_MASK and type(mtime_ns) is int
            and -NS_LIMIT <= mtime_ns < NS_LIMIT and type(atime_ns) is int and -NS_LIMIT <= atime_ns < NS_LIMIT):
        mode = _int_field(raw, "mode", where=where, low=0, high=MODE_MASK + 1)
        mtime_ns = _int_field(raw, "mtime_ns", where=where, low=-NS_LIMIT, high=NS_LIMIT)
        atime_ns = _int_field(raw, "atime_ns", where=where, low=-NS_LIMIT, high=NS_LIMIT)
    ctime = raw.get("source_ctime_ns")
    # Context for a diagnosis, never restored: dropped when it is not a time a manifest could hold.
    ctime_ns = ctime if type(ctime) is int and -2**63 * 10**9 <= ctime < 2**63 * 10**9 else None  # NS_LIMIT
    size, sha256, target = 0, None, None
    if kind == "file":
        size = _int_field(raw, "size", where=where, low=0, high=SIZE_LIMIT)
        sha256 = raw.get("sha256")
        if not isinstance(sha256, str) or not SHA256_RE.fullmatch(sha256):
            raise IntegrityError(f"{where}: entry {show(path)} has a malformed sha256 {show(sha256)}", path=where)
    elif kind == "symlink":
        if mode != 0o777:
            # Linux symlinks always have mode 0o777: no download could ever restore another one.
            raise IntegrityError(f"{where}: symlink {show(path)} has mode {mode:#o}; Linux links are 0o777",
                                 path=where)
        target = raw.get("target")
        if not isinstance(target, str):
            raise UnsafePathError(f"{where}: symlink {show(path)} has no string target", path=path)
        _check_target(path, target, where=where)
    uid, gid, xattrs, hardlink, extents, flags = extended_fields(raw, path, kind, size, where=where)
    device = device_number(raw, path, kind, where=where)
    # Positional, in model.FIELD_ORDER (nlink is never in a manifest).
    return FileMeta(path, kind, mode, mtime_ns, atime_ns, size, sha256, target, ctime_ns, uid, gid, xattrs, hardlink,
                    None, extents, flags, device)


def _check_target(path: str, target: str, *, where: str) -> None:
    """A target ``symlink(2)`` could have made: bytes of a name (no lone surrogate), under PATH_MAX."""
    try:
        size = len(os.fsencode(target))
    except UnicodeEncodeError as err:
        raise UnsafePathError(f"{where}: symlink {show(path)} has a target {show(target)} holding a lone "
                              "surrogate, which no file name can", path=path) from err
    if size > TARGET_MAX:
        raise IntegrityError(f"{where}: symlink {show(path)} has a target of {size} bytes; symlink(2) takes at "
                             f"most {TARGET_MAX}", path=where)

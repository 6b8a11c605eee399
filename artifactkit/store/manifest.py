"""The per-version manifest: transparent JSON, validated field by field when read back."""

from __future__ import annotations

import hashlib
import json
import operator
import os
import re
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from artifactkit.errors import IntegrityError, ManifestLimitError, TimestampNotRepresentable, UnsafePathError
from artifactkit.metadata.model import KINDS, MODE_MASK, FileMeta
from artifactkit.store.manifest_extended import check_hardlinks, encode_extended, extended_fields, rdev_field
from artifactkit.store.manifest_limits import (
    FILE_BYTES_SETTING,
    MANIFEST_BYTES_SETTING,
    SIZE_LIMIT,
    TARGET_MAX,
    clip,
    decode_manifest,
    file_size_limit,
    may_hold_surrogates,
    show,
)
from artifactkit.store.manifest_limits import MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES  # noqa: PLC0414 - re-export
from artifactkit.store.manifest_limits import manifest_size_limit as manifest_size_limit  # noqa: PLC0414 - re-export
from artifactkit.store.paths import check_artifact_name, check_tree_shape

FORMAT: Final = "artifactkit.manifest/2"
# FIFOs and devices (kinds "fifo", "char", "block"; a device's "rdev": [major, minor]) were added to format 2
# without a new version: every reader before them refuses an entry of an unknown kind (IntegrityError naming
# it) before writing anything, so an older kit can never mis-restore one, and every other manifest stays
# readable by it.
#: Formats still read: version 1 records no owners, xattrs, links, holes or flags (never compared then).
READABLE_FORMATS: Final = frozenset({"artifactkit.manifest/1", FORMAT})
_SHA256_RE: Final = re.compile(r"[0-9a-f]{64}")
# Timestamps any Linux filesystem could hold fit in 64-bit ns; larger is a forged manifest.
_NS_LIMIT: Final = 2**63


@attrs.frozen
class Manifest:
    """One published version: the artifact name, how the source was read, and every entry."""

    name: str
    entries: tuple[FileMeta, ...]
    source_read_noatime: bool = True

    def to_bytes(self) -> bytes:
        """Canonical bytes (entries by path, one per line, keys sorted within each), so equal trees hash equal."""
        return manifest_bytes(self.name, self.source_read_noatime, [(e.path, encode_entry(e)) for e in self.entries])

    def files(self) -> list[FileMeta]:
        """The regular-file entries, whose blobs the store must hold."""
        return [entry for entry in self.entries if entry.kind == "file"]


def check_representable(entries: Iterable[FileMeta], *, where: str) -> None:
    """Refuse, before anything is written, a time the manifest format cannot carry back.

    tmpfs stores the kernel's full 64-bit seconds, so a real file can hold a time past 2**63 ns
    (year 2262); publishing it would make a version that every download then refuses.
    """
    low, high = -_NS_LIMIT, _NS_LIMIT
    for entry in entries:
        # Both compared inline, the field named only for a refusal: a getattr per field took 15 ms of a
        # 100,000-file publish, this 5.
        if low <= entry.mtime_ns < high and low <= entry.atime_ns < high:
            continue
        for field in ("mtime_ns", "atime_ns"):
            value = getattr(entry, field)
            if not low <= value < high:
                raise TimestampNotRepresentable(
                    f"{where}: {entry.path!r} has {field}={value}, outside the manifest's range "
                    f"[-2**63, 2**63) ns; set a time inside it before publishing",
                    path=entry.path, field=field, actual=value)


_dumps = json.JSONEncoder(sort_keys=True, ensure_ascii=True, separators=(", ", ": ")).encode
#: How every entry's line starts: ``atime_ns`` sorts before every other key. The stat cache keeps the rest
#: of a line and puts a fresh atime in front (``StatCache.record`` checks a line really starts so).
ATIME_PREFIX: Final = '{"atime_ns": '


def encode_entry(entry: FileMeta) -> str:
    """One entry's manifest line (no newline): compact, keys sorted, exactly what the C encoder writes."""
    if entry.extents is None and (line := file_line(entry, entry.sha256, entry.flags)) is not None:
        return line
    return _dumps(_entry_doc(entry))


def file_line(entry: FileMeta, sha: str | None, flags: int | None) -> str | None:
    """The line of ``entry`` read as ``sha`` with ``flags`` and no holes, if it is the usual regular file
    (owners and ctime recorded, no xattrs, no second name), formatted directly; else ``None``.

    A dict and a sorted encode per entry were a sixth of a 10,000-file publish, all of it in the parent.
    ``tests/store/test_manifest_encoding.py`` holds this to the C encoder's bytes.
    """
    mode, mtime, atime, size, ctime, uid, gid = (
        entry.mode, entry.mtime_ns, entry.atime_ns, entry.size, entry.ctime_ns, entry.uid, entry.gid)
    if not (entry.kind == "file" and not entry.xattrs and entry.hardlink is None
            and type(sha) is str and _SHA256_RE.fullmatch(sha) and type(mode) is int and type(mtime) is int
            and type(atime) is int and type(size) is int and type(ctime) is int and type(uid) is int
            and type(gid) is int and (flags is None or type(flags) is int)):
        return None
    flag_field = "" if flags is None else f'"flags": {flags}, '
    return (f'{{"atime_ns": {atime}, {flag_field}"gid": {gid}, "kind": "file", "mode": {mode}, '
            f'"mtime_ns": {mtime}, "path": {encode_basestring_ascii(entry.path)}, "sha256": "{sha}", '
            f'"size": {size}, "source_ctime_ns": {ctime}, "uid": {uid}}}')


def encode_entry_by_json(entry: FileMeta) -> str:
    """The same line through the C encoder alone: the reference :func:`encode_entry` is tested against."""
    return _dumps(_entry_doc(entry))


def manifest_bytes(name: str, source_read_noatime: bool, lines: list[tuple[str, str]]) -> bytes:
    """The canonical manifest of ``(path, encoded entry)`` pairs (paths unique; sorted here). ``lines`` is
    consumed: sorted, then emptied.

    The lines are joined by hand: ``indent=`` would force json's pure-Python encoder (a quarter of a
    10,000-file publish).
    """
    lines.sort()
    # The head and the tail go onto the first and last line, so the text is one join: joining the entries
    # and then formatting them into the text copied its 4.5 MB once more for 10,000 entries.
    texts = [line for _, line in lines] or [""]
    lines.clear()
    texts[0] = f"{_head(name, source_read_noatime)}{texts[0]}"
    texts[-1] = f"{texts[-1]}\n]}}\n"
    text = ",\n".join(texts)
    # The lines go before the text is encoded: each of the three is a manifest's worth of memory (29 MB for
    # 100,000 files), and all three alive at once were the peak of a large publish.
    del texts
    body = text.encode()
    check_manifest_size(name, body)
    return body


def check_manifest_size(name: str, body: bytes) -> None:
    """Refuse a manifest its own readers would refuse (every publish's manifest is built here or by the native
    core's manifest (:meth:`~artifactkit.engine.native.NativeEngine.encode`, which calls this)."""
    if len(body) > (limit := manifest_size_limit()):
        raise ManifestLimitError(
            f"the manifest of {name!r} would have {len(body)} bytes, more than the limit of {limit} its readers "
            f"take; set {MANIFEST_BYTES_SETTING} higher where it is published and downloaded",
            limit=limit, actual=len(body), setting=MANIFEST_BYTES_SETTING)


def _head(name: str, source_read_noatime: bool) -> str:
    head = _dumps({"format": FORMAT, "name": name, "source_read_noatime": source_read_noatime})
    return f"{head[:-1]},\n\"entries\": [\n"


def manifest_head(name: str, source_read_noatime: bool) -> bytes:
    """How :func:`manifest_bytes` begins for ``name`` and ``source_read_noatime``, up to the first entry."""
    return _head(name, source_read_noatime).encode()


def digest_of(data: bytes) -> str:
    """sha256 hex of a manifest's bytes: what an :class:`ArtifactRef` pins."""
    return hashlib.sha256(data).hexdigest()


def _entry_doc(entry: FileMeta) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "path": entry.path, "kind": entry.kind, "mode": entry.mode,
        "mtime_ns": entry.mtime_ns, "atime_ns": entry.atime_ns,
    }
    if entry.kind == "file":
        doc["size"] = entry.size
        doc["sha256"] = entry.sha256
    if entry.kind == "symlink":
        doc["target"] = entry.target
    if entry.ctime_ns is not None:
        doc["source_ctime_ns"] = entry.ctime_ns  # context for diagnosis; never restored
    return encode_extended(entry, doc)


def parse_manifest(data: bytes, *, where: str) -> Manifest:
    """Parse and validate untrusted manifest bytes; any defect raises a named error, never a KeyError.

    Bounded work for any input: nesting, sizes, data runs and xattrs are held to the bounds documented in
    ``manifest_limits``, and every message quotes a hostile value shortened.
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


def check_file_sizes(entries: Sequence[FileMeta], limit: int, *, where: str) -> None:
    """Every file within ``limit`` (:func:`~artifactkit.store.manifest_limits.file_size_limit`), or
    :class:`ManifestLimitError` naming the first past it: the claim is refused before a byte is hashed or
    written, whatever blob a writer of the store planted to match it. Publish refuses such a source file
    (``scan.py``), so every version it makes reads back here."""
    if max(map(_SIZE, entries), default=0) <= limit:  # one C loop: 9 ms for 100,000 entries, under 1 % of their parse
        return
    entry = next(entry for entry in entries if entry.size > limit)
    raise file_too_large(f"{where}: entry {show(entry.path)} claims", entry.size, limit, where=where)


def file_too_large(what: str, size: int, limit: int, *, where: str) -> ManifestLimitError:
    """``what`` (an entry that claims, a source file that has) ``size`` bytes, past the single-file ``limit``."""
    return ManifestLimitError(
        f"{what} {size} bytes, more than the {limit} a file may have ({FILE_BYTES_SETTING}: a download hashes every "
        "byte, holes too); set it higher where the tree is published and downloaded",
        path=where, limit=limit, actual=size, setting=FILE_BYTES_SETTING)


_SIZE: Final = operator.attrgetter("size")


@runtime_checkable
class FileBytes(Protocol):
    """Captured entries that know their files' bytes without making every entry (the native core's capture)."""

    def file_bytes(self) -> int:
        """The bytes of every regular file, a hard link's once."""


def check_source_sizes(entries: Sequence[FileMeta], limit: int, *, root: str) -> None:
    """A source tree's captured ``entries`` with no file past ``limit``, else :class:`ManifestLimitError` naming
    the first in scan order (the reference's scan finds it as it goes): a publish of it would be a version no
    download reads. Nothing has been read yet."""
    if isinstance(entries, FileBytes) and entries.file_bytes() <= limit:
        return  # the usual tree: no entry made to learn that none is larger
    oversized = next((entry for entry in entries if entry.size > limit), None)
    if oversized is not None:
        raise file_too_large(f"source {root!r}: {oversized.path!r} has", oversized.size, limit, where=root)


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
                and type(mtime) is int and -_NS_LIMIT <= mtime < _NS_LIMIT
                and type(atime) is int and -_NS_LIMIT <= atime < _NS_LIMIT and type(size) is int and 0 <= size < 2**63
                and type(sha) is str and _SHA256_RE.fullmatch(sha) and type(uid) is int and 0 <= uid < 2**32
                and type(gid) is int and 0 <= gid < 2**32 and type(flags) is int and 0 <= flags < 2**32):
            # Positional (model.FIELD_ORDER): the keywords cost as much as the object, once per entry.
            # 2**63 is SIZE_LIMIT and the ns range, as literals: a global lookup per entry is measurable.
            return FileMeta(path, "file", mode, mtime, atime, size, sha, None,
                            ctime if type(ctime) is int and -2**63 <= ctime < 2**63 else None,
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
            and -_NS_LIMIT <= mtime_ns < _NS_LIMIT and type(atime_ns) is int and -_NS_LIMIT <= atime_ns < _NS_LIMIT):
        mode = _int_field(raw, "mode", where=where, low=0, high=MODE_MASK + 1)
        mtime_ns = _int_field(raw, "mtime_ns", where=where, low=-_NS_LIMIT, high=_NS_LIMIT)
        atime_ns = _int_field(raw, "atime_ns", where=where, low=-_NS_LIMIT, high=_NS_LIMIT)
    ctime = raw.get("source_ctime_ns")
    # Context for a diagnosis, never restored: dropped when it is not a time a manifest could hold.
    ctime_ns = ctime if type(ctime) is int and -2**63 <= ctime < 2**63 else None  # _NS_LIMIT, folded
    size, sha256, target = 0, None, None
    if kind == "file":
        size = _int_field(raw, "size", where=where, low=0, high=SIZE_LIMIT)
        sha256 = raw.get("sha256")
        if not isinstance(sha256, str) or not _SHA256_RE.fullmatch(sha256):
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
    return FileMeta(path=path, kind=kind, mode=mode, size=size, mtime_ns=mtime_ns, atime_ns=atime_ns,
                    sha256=sha256, target=target, ctime_ns=ctime_ns, uid=uid, gid=gid, xattrs=xattrs,
                    hardlink=hardlink, extents=extents, flags=flags, rdev=rdev_field(raw, path, kind, where=where))


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

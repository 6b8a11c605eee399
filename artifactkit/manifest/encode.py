"""The per-version manifest and how it is written: transparent JSON, one canonical line per entry."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring_ascii
from typing import Any, Final

import attrs

from artifactkit.errors import TimestampNotRepresentable
from artifactkit.manifest.extended import too_many_runs
from artifactkit.manifest.fields import NS_LIMIT, SHA256_RE, WRITTEN, FieldType
from artifactkit.manifest.limits import MAX_EXTENTS
from artifactkit.metadata.model import FileMeta

FORMAT: Final = "artifactkit.manifest/2"
# FIFOs and devices (kinds "fifo", "char", "block"; a device's number as [major, minor]) were added to format 2
# without a new version: every reader before them refuses an entry of an unknown kind (IntegrityError naming
# it) before writing anything, so an older kit can never mis-restore one, and every other manifest stays
# readable by it.
#: Formats still read: version 1 records no owners, xattrs, links, holes or flags (never compared then).
READABLE_FORMATS: Final = frozenset({"artifactkit.manifest/1", FORMAT})


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

    Every time a file can have is inside (the kernel's 64-bit seconds): only a ``FileMeta`` made by hand can be
    outside, and publishing it would make a version that every download then refuses.
    """
    low, high = -NS_LIMIT, NS_LIMIT
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
                    f"[-2**63 s, 2**63 s); set a time inside it before publishing",
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
            and type(sha) is str and SHA256_RE.fullmatch(sha) and type(mode) is int and type(mtime) is int
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


@attrs.frozen
class SortedLines:
    """A manifest as its head's values and its canonical entry lines in order, a chunk at a time, never joined:
    format 3 stores none of that text (:func:`~artifactkit.manifest.tree_write.write_tree` makes the tree's objects
    of the lines), and joined it was the manifest's bytes again beside them (284 MB for a million files).
    ``chunks`` is read once."""

    name: str
    source_read_noatime: bool
    chunks: Iterable[Iterable[str]]

    def lines(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.chunks)

    def joined(self) -> bytes:
        """The format-2 text of the same lines (:func:`manifest_bytes`'), made by hand: ``indent=`` would force
        json's pure-Python encoder (a quarter of a 10,000-file publish)."""
        # The head and the tail go onto the first and last line, so the text is one join.
        texts = list(self.lines()) or [""]
        texts[0] = f"{_head(self.name, self.source_read_noatime)}{texts[0]}"
        texts[-1] = f"{texts[-1]}\n]}}\n"
        text = ",\n".join(texts)
        del texts  # before the text is encoded: each is a manifest's worth of memory
        return text.encode()


def sorted_lines(name: str, source_read_noatime: bool, lines: list[tuple[str, str]]) -> SortedLines:
    """The canonical manifest of ``(path, encoded entry)`` pairs (paths unique), as its lines sorted by path.
    ``lines`` is consumed: sorted, then emptied."""
    lines.sort()
    texts = [line for _, line in lines]
    lines.clear()
    return SortedLines(name, source_read_noatime, (texts,))


def manifest_bytes(name: str, source_read_noatime: bool, lines: list[tuple[str, str]]) -> bytes:
    """The canonical format-2 manifest of ``(path, encoded entry)`` pairs (:func:`sorted_lines`, joined); not held
    to the manifest limit here: format 3 stores it as tree objects, each held to it (tree_write)."""
    return sorted_lines(name, source_read_noatime, lines).joined()


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
    """The entry's JSON object from the field table: every required field its kind carries, each optional one where
    it is recorded, on any kind (the reader refuses it where no row lets it be), each value as its type is written.

    The slow path (directories, links, files with xattrs, holes or a second name): the table's loop costs a
    directory's line 55,100 instructions where the dict it replaced cost 41,600 (callgrind; ``_dumps`` is most of
    both; fetching the values in one ``attrgetter`` call saved none of it). The usual file's line
    (:func:`file_line`) and the native core's encoder do not come here.
    """
    doc: dict[str, Any] = {}
    for key, field in WRITTEN:
        value = getattr(entry, field.name)
        if field.optional:
            if value is None or (field.type == "xattrs" and not value):
                continue
        elif entry.kind not in field.kinds:
            continue
        write = _WRITE.get(field.type)
        doc[key] = value if write is None else write(entry.path, value)
    return doc


def _runs(path: str, runs: Any) -> list[list[int]]:
    if len(runs) > MAX_EXTENTS:
        # Publish writes through here: a version its own reader refuses must never be made.
        raise too_many_runs(path, len(runs))
    return [list(run) for run in runs]


#: How a value of each type that JSON has no form for is written (every other value is written as it is).
_WRITE: Final[dict[FieldType, Callable[[str, Any], Any]]] = {
    "xattrs": lambda _path, xattrs: [[name, base64.b64encode(value).decode("ascii")] for name, value in xattrs],
    "runs": _runs,
    "device": lambda _path, pair: list(pair),
}

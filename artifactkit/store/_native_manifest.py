"""The manifest in the native core, both ways, each with the reference's errors.

**Encoding** (publish; :func:`artifactkit._native.manifest_bytes`): the bytes
:func:`~artifactkit.store.manifest.manifest_bytes` makes of the same entries, with the reference's errors.

The core merges each entry with what its read found as ``assemble`` does (a hard link's later names take
their first name's), encodes it as :func:`~artifactkit.store.manifest.encode_entry` does (the C JSON
encoder's bytes: sorted keys, every non-ASCII character escaped, lone surrogates included), sorts the lines
as Python sorts ``(path, line)`` and joins them. It takes only values of exact JSON types and answers ``None`` for
anything else, so the caller encodes those with the reference: no value is ever encoded two ways.

**Parse** (every read of a manifest; :func:`artifactkit._native.parse_manifest`), with the reference's
refusals: :func:`parse` returns what :func:`~artifactkit.store.manifest.parse_manifest` returns for the same
bytes, and raises what it raises.

The core reads and checks the whole manifest with the GIL released and makes each ``FileMeta`` by calling
the class, as the reference does; it decides acceptance only. Whatever it does not accept, it declines
(``NativeFailure("manifest_refused" | "manifest_unsure", entry, {"check", "detail"})``), and the reference
parses those bytes again: so a refusal is the reference's own error, every message written once, and a
shape the core leaves to Python (a lone surrogate, an integer past 64 bits, ``-0``, nesting deeper than the
format's five levels; see ``native/src/manifest/parse/json.rs``) still reads as the reference reads it.
Refusals are the rare path, and the reference's parse is bounded (``manifest_limits``); a decline costs
the core's read, a fraction of the reference's.

Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from artifactkit import _native
from artifactkit.metadata.model import FileMeta
from artifactkit.store._native_capture import CapturedEntries
from artifactkit.store.manifest import Manifest, check_manifest_size, manifest_head, parse_manifest
from artifactkit.store.manifest_extended import too_many_runs
from artifactkit.store.manifest_limits import MAX_EXTENTS, SIZE_LIMIT, file_size_limit
from artifactkit.store.plan import Content
from artifactkit.store.stage import Staged


def manifest_bytes(name: str, source_read_noatime: bool, lines: list[tuple[str, str]], entries: Sequence[FileMeta],
                   known: dict[int, Content] | None = None, *, found: Sequence[Staged] = ()) -> bytes | None:
    """The manifest :func:`~artifactkit.store.publish.assemble` makes of the encoded ``lines`` and of ``entries``,
    each with what the plan knew of it (``known``, by index) or its read found (``found``) and a hard link's
    later names with their first name's; or ``None`` where only the reference can (a value of no exact JSON
    type, a later name without its first)."""
    return _checked(name, entries, lambda: _native.manifest_bytes(
        manifest_head(name, source_read_noatime), lines, list(entries), known or {}, list(found), MAX_EXTENTS))


def manifest_captured(name: str, source_read_noatime: bool, entries: CapturedEntries,
                      found: Sequence[Staged] | _native.StageState) -> bytes | None:
    """:func:`manifest_bytes` of a captured tree's every entry with what its read found (``found``: the reads, or
    the state that kept them all), the entries taken from the core's capture (no ``FileMeta`` made); ``None``
    where only the reference can."""
    reads = found if isinstance(found, _native.StageState) else list(found)
    return _checked(name, entries, lambda: _native.manifest_captured(
        manifest_head(name, source_read_noatime), entries.tree, reads, MAX_EXTENTS))


def _checked(name: str, entries: Sequence[FileMeta], encode: Callable[[], bytes | None]) -> bytes | None:
    """``encode()``'s manifest of ``entries``, its failures raised as the reference raises them, its size checked."""
    try:
        body = encode()
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        if kind == "too_many_runs":
            raise too_many_runs(entries[at].path, fields["count"]) from None
        raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference encoder does "
                             "not raise") from None
    if body is not None:
        check_manifest_size(name, body)
    return body


def size_limit() -> int:
    """:func:`~artifactkit.store.manifest_limits.file_size_limit` as the core takes it: past ``SIZE_LIMIT`` no size
    parses anyway, so a larger setting is that (the core's integer is 64 bits)."""
    return min(file_size_limit(), SIZE_LIMIT)


def parse(data: bytes, *, where: str) -> Manifest:
    """:func:`~artifactkit.store.manifest.parse_manifest` of ``data`` (``where`` names it in a refusal)."""
    limit = size_limit()  # a setting that is no limit: the reference's error, before anything is read
    try:
        name, noatime, entries = _native.parse_manifest(data, FileMeta, limit)
    except _native.NativeFailure:
        return parse_manifest(data, where=where)
    return Manifest(name=name, entries=entries, source_read_noatime=noatime)

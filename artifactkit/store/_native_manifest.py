"""The native core's manifest encoding (:func:`artifactkit._native.manifest_bytes`): the bytes
:func:`~artifactkit.store.manifest.manifest_bytes` makes of the same entries, with the reference's errors.

The core encodes each entry as :func:`~artifactkit.store.manifest.encode_entry` does (the C JSON encoder's
bytes: sorted keys, every non-ASCII character escaped, lone surrogates included), sorts the lines as Python
sorts ``(path, line)`` and joins them. It takes only values of exact JSON types and answers ``None`` for
anything else, so the caller encodes those with the reference: no value is ever encoded two ways. Importing
this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from artifactkit import _native
from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.manifest import check_manifest_size, manifest_head
from artifactkit.store.manifest_extended import too_many_runs
from artifactkit.store.manifest_limits import MAX_EXTENTS

#: What a read found, replacing the capture's (``plan.Content``): ``(sha256, flags, extents)``.
Facts = tuple[str, int | None, Extents | None]


def manifest_bytes(name: str, source_read_noatime: bool, lines: list[tuple[str, str]],
                   items: list[tuple[FileMeta, Facts | None]]) -> bytes | None:
    """The manifest of the encoded ``lines`` and of ``items`` — each entry with what its read found, if it
    was read — or ``None`` where an entry holds a value only the reference encodes."""
    try:
        body = _native.manifest_bytes(manifest_head(name, source_read_noatime), lines, items, MAX_EXTENTS)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        if kind == "too_many_runs":
            raise too_many_runs(items[at][0].path, fields["count"]) from None
        raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference encoder does "
                             "not raise") from None
    if body is not None:
        check_manifest_size(name, body)
    return body

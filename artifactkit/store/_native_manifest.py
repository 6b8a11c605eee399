"""The manifest parse in the native core (:func:`artifactkit._native.parse_manifest`), with the reference's
refusals: :func:`parse` returns what :func:`~artifactkit.store.manifest.parse_manifest` returns for the same
bytes, and raises what it raises.

The core reads and checks the whole manifest with the GIL released and makes each ``FileMeta`` by calling
the class, as the reference does; it decides acceptance only. Whatever it does not accept, it declines
(``NativeFailure("manifest_refused" | "manifest_unsure", entry, {"check", "detail"})``), and the reference
parses those bytes again: so a refusal is the reference's own error, every message written once, and a
shape the core leaves to Python (a lone surrogate, an integer past 64 bits, ``-0``, nesting deeper than the
format's five levels; see ``native/src/manifest_parse/json.rs``) still reads as the reference reads it.
Refusals are the rare path, and the reference's parse is bounded (``manifest_limits``); a decline costs
the core's read, a fraction of the reference's.

Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from artifactkit import _native
from artifactkit.metadata.model import FileMeta
from artifactkit.store.manifest import Manifest, parse_manifest


def parse(data: bytes, *, where: str) -> Manifest:
    """:func:`~artifactkit.store.manifest.parse_manifest` of ``data`` (``where`` names it in a refusal)."""
    try:
        name, noatime, entries = _native.parse_manifest(data, FileMeta)
    except _native.NativeFailure:
        return parse_manifest(data, where=where)
    return Manifest(name=name, entries=entries, source_read_noatime=noatime)

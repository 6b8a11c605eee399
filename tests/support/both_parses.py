"""Both manifest parses side by side: the reference's (:func:`~artifactkit.manifest.encode.parse_manifest`) and
the native engine's (:meth:`artifactkit.engine.native.NativeEngine.parse`), held to the same :class:`Manifest` or
the same error. Where the core is not built, the reference's alone (``tests/native`` fails instead under
``ARTIFACTKIT_REQUIRE_FS_MATRIX=1``).

The core's own verdict is checked too, not only what the wrapper returns (which falls back to the
reference for whatever the core declines, so it always agrees): an acceptance must give the reference's
entries field for field; a refusal must be one the reference makes, with the error class its check names
(:data:`CHECK_ERRORS`); "unsure" is allowed only for the shapes the core leaves to the reference
(:func:`unsure_shape`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import re
from types import ModuleType

import pytest

from artifactkit.errors import IntegrityError, ManifestLimitError, TreeTooDeepError, UnsafePathError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import Manifest
from artifactkit.manifest.limits import FILE_BYTES_SETTING, SIZE_LIMIT, check_containers, file_size_limit
from artifactkit.manifest.parse import parse_manifest
from artifactkit.metadata.model import FIELD_ORDER, FileMeta
from tests.support.core_layout import held_layout

#: The reference's error for each check the core names in a refusal (native/src/manifest/parse.rs).
CHECK_ERRORS: dict[str, type[Exception]] = {
    **dict.fromkeys(["utf8", "doc", "format", "entries", "entry", "kind", "mode", "mtime_ns", "atime_ns", "size",
                     "sha256", "symlink_mode", "target_size", "uid", "gid", "flags", "owner", "xattrs", "hardlink",
                     "extents", "kind_field", "rdev", "hardlinks", "name", "noatime"], IntegrityError),
    **dict.fromkeys(["path", "target", "tree"], UnsafePathError),
    **dict.fromkeys(["extents_count", "file_size"], ManifestLimitError),
    "path_max": TreeTooDeepError,
}
#: How deep the format nests (document, entry list, entry, xattr list, xattr pair): deeper is unsure.
FORMAT_DEPTH = 5
# "-0", which serde_json reads as the float -0.0 and Python as the integer 0, and "-0.0" itself, which the core
# cannot tell from "-0" once read (anywhere, even in a string: this only widens what may be unsure; found by
# hypothesis: '"uid": -0.0' declined as unsure, the reference refusing it as a float).
_MINUS_ZERO = re.compile(rb"-0(?![0-9eE])(?:\.0*(?![0-9]))?")


@functools.cache
def core() -> ModuleType | None:
    """``artifactkit._native``, or ``None`` where it is not built."""
    try:
        return importlib.import_module("artifactkit._native")
    except ImportError:
        return None


def verdict(data: bytes) -> tuple[str, str | None, int | None] | Manifest:
    """What the core alone says of ``data`` (``parse_tree``, kept in the core, its entries made whole): the
    manifest it accepts, or ``(kind, check, entry)``."""
    native = core()
    assert native is not None
    try:
        tree = native.parse_tree(data, hashlib.sha256(data).hexdigest(), _size_limit())
    except native.NativeFailure as failure:
        kind, at, fields = failure.args
        return kind, fields["check"], at
    return Manifest(name=tree.name, entries=tree.metas(FileMeta), source_read_noatime=tree.noatime)


def _size_limit() -> int:
    """The file size limit as the core is given it (``NativeEngine.parse``'s)."""
    return min(file_size_limit(), SIZE_LIMIT)


def fields_of(manifest: Manifest) -> str:
    """Every field of every entry, ``ctime_ns`` and ``nlink`` too (no part of equality), with its type."""
    return repr((manifest.name, manifest.source_read_noatime,
                 [[getattr(entry, field) for field in FIELD_ORDER] for entry in manifest.entries]))


def unsure_shape(data: bytes) -> bool:
    """Whether ``data`` holds what the core leaves to the reference: more lists and objects than its size pays
    for, text that is not JSON to Python, a lone surrogate, an integer past 64 bits, a float past the double
    range or past 64 bits within a time's range (serde_json reads such an integer as that float), ``-0``, or
    nesting past the format's five levels."""
    if _MINUS_ZERO.search(data):
        return True
    try:
        check_containers(data, where="m")
    except ManifestLimitError:
        return True
    try:
        doc = json.loads(data, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return True
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth + 1 > FORMAT_DEPTH:
                return True
            items = list(value.items()) if isinstance(value, dict) else [(None, item) for item in value]
            for key, item in items:
                if isinstance(key, str) and _surrogate(key):
                    return True
                stack.append((item, depth + 1))
        elif ((isinstance(value, str) and _surrogate(value)) or (type(value) is int and not -2**63 <= value < 2**64)
              or (type(value) is float and (abs(value) == float("inf") or 2**63 <= abs(value) <= 2**63 * 10**9))):
            return True
    return False


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def parse_both(data: bytes, *, where: str = "m") -> Manifest:
    """The reference's parse of ``data`` (its manifest, or its error raised), with the core's held to it."""
    try:
        expected = parse_manifest(data, where=where)
    except Exception as err:
        if core() is not None:
            if getattr(err, "setting", None) == FILE_BYTES_SETTING and err.limit is None:  # type: ignore[attr-defined]
                _held_to_setting(data, where, err)  # no limit to give the core: the wrapper's refusal alone
            else:
                _held_to_refusal(data, where, err)
        raise
    if core() is not None:
        _held_to_acceptance(data, where, expected)
    return expected


def _engine_parse(data: bytes) -> tuple[Manifest, ArtifactRef]:
    """The native engine's parse (the core's, a decline the reference's) as a manifest; the ref it was asked of."""
    from artifactkit.engine.native import NativeEngine  # here: where the core is not built, nothing calls this

    ref = ArtifactRef("demo", 1, hashlib.sha256(data).hexdigest())
    parsed = NativeEngine(1, "parse").parse(ref, data, where="m")
    return Manifest(name=parsed.name, entries=tuple(parsed), source_read_noatime=parsed.source_read_noatime), ref


def _same_error(data: bytes, err: Exception) -> None:
    """The engine's parse refuses ``data`` as the reference's refused it (``err``), named as its manifest."""
    ref = ArtifactRef("demo", 1, hashlib.sha256(data).hexdigest())
    with pytest.raises(type(err)) as caught:
        _engine_parse(data)
    with pytest.raises(type(err)) as expected:
        parse_manifest(data, where=f"manifest of {ref}")
    assert (str(caught.value), getattr(caught.value, "context", None)) == (
        str(expected.value), getattr(expected.value, "context", None))


def _held_to_acceptance(data: bytes, where: str, expected: Manifest) -> None:
    found = verdict(data)
    if isinstance(found, Manifest):
        assert fields_of(found) == fields_of(expected)
        held_layout(data, expected)
    else:
        assert found[0] == "manifest_unsure" and unsure_shape(data), f"the core declines a valid manifest: {found}"
    assert fields_of(_engine_parse(data)[0]) == fields_of(expected)


def _held_to_refusal(data: bytes, where: str, err: Exception) -> None:
    found = verdict(data)
    assert not isinstance(found, Manifest), f"the core accepts what the reference refuses with {err!r}"
    kind, check, _ = found
    if kind == "manifest_refused":
        assert check is not None and type(err) is CHECK_ERRORS[check], (found, err)
    else:
        assert kind == "manifest_unsure" and unsure_shape(data), (found, err)
    _same_error(data, err)


def _held_to_setting(data: bytes, where: str, err: Exception) -> None:
    _same_error(data, err)

"""The manifest line of an entry is the same bytes whichever way it is encoded (the direct formatting of the
usual file entry against the C JSON encoder), and the same entry or the same error whichever way it is parsed."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit.conformance.corpus import corpus_names, materialize, needs_root
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import IntegrityError
from artifactkit.manifest.encode import encode_entry, encode_entry_by_json
from artifactkit.manifest.extended import extended_fields
from artifactkit.manifest.parse import parse_entry, parse_entry_in_full
from artifactkit.metadata.model import FileMeta
from tests.strategies import modes, timestamps_ns

_IDS = st.integers(min_value=0, max_value=2**32 - 1)
_PATHS = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=1, max_size=40)


@given(path=_PATHS, mode=modes, mtime=timestamps_ns, atime=timestamps_ns, ctime=st.none() | timestamps_ns,
       size=st.integers(min_value=0, max_value=2**63 - 1), uid=st.none() | _IDS, gid=st.none() | _IDS,
       flags=st.none() | _IDS, sha=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
       xattrs=st.sampled_from([None, (), (("user.k", b"v\x00"),)]), hardlink=st.sampled_from([None, "first"]),
       extents=st.sampled_from([None, (), ((0, 1),)]), kind=st.sampled_from(["file", "file", "dir", "symlink"]))
@example(path='quo"te\\back\tslash\n\x00\udcff\U0001f600é', mode=0o4755, mtime=-1, atime=0, ctime=1, size=0, uid=0,
         gid=0, flags=0, sha="0" * 64, xattrs=None, hardlink=None, extents=None, kind="file")
def test_the_direct_line_is_the_json_encoders_line(**fields: Any) -> None:
    kind = fields.pop("kind")
    entry = FileMeta(path=fields["path"], kind=kind, mode=fields["mode"], mtime_ns=fields["mtime"],
                     atime_ns=fields["atime"], size=fields["size"] if kind == "file" else 0,
                     sha256=fields["sha"] if kind == "file" else None, target="t" if kind == "symlink" else None,
                     ctime_ns=fields["ctime"], uid=fields["uid"], gid=fields["gid"], xattrs=fields["xattrs"],
                     hardlink=fields["hardlink"] if kind == "file" else None,
                     extents=fields["extents"] if kind == "file" else None, flags=fields["flags"])
    assert encode_entry(entry) == encode_entry_by_json(entry)


@pytest.mark.parametrize("name", corpus_names())
def test_every_corpus_entry_encodes_the_same_both_ways(fast_tmp: Path, name: str) -> None:
    if needs_root(name):
        pytest.skip(f"corpus {name!r} needs root here: {needs_root(name)}")
    materialize(name, fast_tmp / name)
    for entry in capture_tree(fast_tmp / name):
        assert encode_entry(entry) == encode_entry_by_json(entry), entry.path


_GOOD = {"atime_ns": 1, "flags": 0, "gid": 0, "kind": "file", "mode": 0o644, "mtime_ns": 2, "path": "a/b",
         "sha256": "0" * 64, "size": 3, "source_ctime_ns": 4, "uid": 0}
_ODD_VALUES = [True, False, None, -1, 0, 1.5, "1", 2**32, 2**62, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 0o7777 + 1,
               [], "A" * 64, {}, 10**4000]


def _parsed(raw: dict[str, Any], parse: Any) -> Any:
    try:
        return parse(raw, where="m")
    except Exception as err:  # noqa: BLE001 - the error itself is what is compared
        return type(err), str(err)


@pytest.mark.parametrize("key", sorted(_GOOD))
def test_the_inline_parse_decides_every_field_as_the_full_parse_does(key: str) -> None:
    assert parse_entry(dict(_GOOD), where="m") == parse_entry_in_full(dict(_GOOD), where="m")
    for value in _ODD_VALUES:
        raw = {**_GOOD, key: value}
        assert _parsed(dict(raw), parse_entry) == _parsed(dict(raw), parse_entry_in_full), (key, value)
    missing = {k: v for k, v in _GOOD.items() if k != key}
    assert _parsed(dict(missing), parse_entry) == _parsed(dict(missing), parse_entry_in_full)
    assert _parsed({**_GOOD, "extra": 1}, parse_entry) == _parsed({**_GOOD, "extra": 1}, parse_entry_in_full)


_NS = st.integers(min_value=-(2**63) * 10**9, max_value=2**63 * 10**9 - 1)  # what a manifest can hold


@given(path=_PATHS, mode=modes, mtime=_NS, atime=_NS, ctime=_NS,
       size=st.integers(min_value=0, max_value=2**63 - 1), uid=_IDS, gid=_IDS, flags=_IDS)
def test_a_written_line_parses_back_the_same_both_ways(**f: Any) -> None:
    entry = FileMeta(path=f["path"], kind="file", mode=f["mode"], mtime_ns=f["mtime"], atime_ns=f["atime"],
                     size=f["size"], sha256="ab" * 32, ctime_ns=f["ctime"], uid=f["uid"], gid=f["gid"], xattrs=(),
                     flags=f["flags"])
    raw = json.loads(encode_entry(entry))
    assert parse_entry(dict(raw), where="m") == parse_entry_in_full(dict(raw), where="m") == entry
    # Every field by name, ctime_ns too (it takes no part in ==): the inline parse constructs positionally.
    assert attrs.asdict(parse_entry(dict(raw), where="m")) == attrs.asdict(entry)


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _read_value(text: str) -> bytes | None:
    raw = {"path": "a", "kind": "file", "uid": 0, "gid": 0, "xattrs": [["user.k", text]]}
    try:
        xattrs = extended_fields(raw, "a", "file", 0, where="m")[2]
    except IntegrityError:
        return None
    assert xattrs is not None
    return xattrs[0][1]


@given(st.text(alphabet="AZaz09+/=-_ \n\x00é", max_size=14) | st.binary(max_size=20).map(
    lambda data: base64.b64encode(data).decode()))
@example("dg==")
@example("dg=")
@example("dg")
@example("dg===")
@example("=dg=")
@example("dg==dg==")
@example("")
def test_an_xattr_value_reads_exactly_when_strict_base64_decodes_it(text: str) -> None:
    # The parser calls binascii's strict mode directly (the regex of b64decode(validate=True) was half
    # the cost of an xattr): the same texts must read, as the same bytes.
    assert _read_value(text) == _b64decode(text)

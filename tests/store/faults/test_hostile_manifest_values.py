"""Manifests as untrusted input, continued: every other value a writer of the store controls ends in a named
error with a short message, and the size limit's setting is read strictly (issue 23)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifactkit import IntegrityError, UnsafePathError
from artifactkit.errors import ManifestLimitError
from artifactkit.manifest import limits as manifest_module
from artifactkit.manifest.encode import FORMAT
from tests.support.both_parses import parse_both
from tests.support.hostile_manifest import (
    MESSAGE_LIMIT,
    NAMED,
    SHA,
    body,
    doc,
    file_entry,
    refusal,
    root_entry,
    with_raw,
)

# --- 3. everything else a hostile writer controls -----------------------------------------------------

BIG_INT = b"1" * 5000  # past Python's 4300-digit limit on int(str): json.loads raises a bare ValueError
HUGE = "x" * 5_000_000
SURROGATE = "a\ud800"  # json.dumps writes "a\\ud800": no filesystem name decodes to it

HOSTILE: dict[str, tuple[bytes, type[Exception]]] = {
    "format-a-list": (body({**doc(), "format": []}), IntegrityError),
    "format-an-object": (body({**doc(), "format": {"a": 1}}), IntegrityError),
    "format-huge": (body({**doc(), "format": HUGE}), IntegrityError),
    "name-a-list": (body({**doc(), "name": ["demo"]}), IntegrityError),
    "name-huge": (body({**doc(), "name": HUGE}), IntegrityError),
    "noatime-huge": (body({**doc(), "source_read_noatime": HUGE}), IntegrityError),
    "top-level-a-number": (b"5", IntegrityError),
    "top-level-a-string": (json.dumps(HUGE).encode(), IntegrityError),
    "top-level-null": (b"null", IntegrityError),
    "big-int-at-top": (with_raw(doc(x="@"), "@", BIG_INT), IntegrityError),
    "big-int-as-mode": (with_raw(doc(file_entry(mode="@")), "@", BIG_INT), IntegrityError),
    "big-int-as-size": (with_raw(doc(file_entry(size="@")), "@", BIG_INT), IntegrityError),
    "4000-digit-int-as-mtime": (with_raw(doc(file_entry(mtime_ns="@")), "@", b"9" * 4000), IntegrityError),
    "nan": (with_raw(doc(x="@"), "@", b"NaN"), IntegrityError),
    "infinity-as-size": (with_raw(doc(file_entry(size="@")), "@", b"Infinity"), IntegrityError),
    "minus-infinity": (with_raw(doc(x="@"), "@", b"-Infinity"), IntegrityError),
    "entry-a-huge-string": (body({**doc(), "entries": [root_entry(), HUGE]}), IntegrityError),
    "entry-a-list": (body({**doc(), "entries": [root_entry(), [1, 2]]}), IntegrityError),
    "entries-a-string": (body({**doc(), "entries": HUGE}), IntegrityError),
    "path-a-huge-list": (body(doc(file_entry(path=[0] * 1_000_000))), UnsafePathError),
    "path-a-lone-surrogate": (body(doc(file_entry(path=SURROGATE))), UnsafePathError),
    "path-huge-and-unclean": (body(doc(file_entry(path="../" + HUGE))), UnsafePathError),
    "path-huge-under-a-missing-dir": (body(doc(file_entry(path=HUGE + "/a"))), UnsafePathError),
    "target-a-lone-surrogate": (body(doc({**root_entry(), "path": "l", "kind": "symlink", "mode": 0o777,
                                          "target": SURROGATE})), UnsafePathError),
    "target-longer-than-path-max": (body(doc({**root_entry(), "path": "l", "kind": "symlink", "mode": 0o777,
                                              "target": "a/" * 3000})), IntegrityError),
    "hardlink-a-lone-surrogate": (body(doc(file_entry(), file_entry(path="b", hardlink=SURROGATE))), IntegrityError),
    "hardlink-huge": (body(doc(file_entry(), file_entry(path="b", hardlink=HUGE))), IntegrityError),
    "kind-huge": (body(doc(file_entry(kind=HUGE))), IntegrityError),
    "sha-huge": (body(doc(file_entry(sha256=HUGE))), IntegrityError),
    "mode-huge-string": (body(doc(file_entry(mode=HUGE))), IntegrityError),
    "xattrs-an-object": (body(doc(file_entry(uid=0, gid=0, xattrs={"user.a": "eA=="}))), IntegrityError),
    "xattr-a-huge-list": (body(doc(file_entry(uid=0, gid=0, xattrs=[[0] * 100_000]))), IntegrityError),
    "xattr-value-past-64-KiB": (body(doc(file_entry(uid=0, gid=0, xattrs=[
        ["user.k", base64.b64encode(b"v" * (65536 + 1)).decode()]]))), IntegrityError),
    "xattr-value-megabytes-of-base64": (body(doc(file_entry(uid=0, gid=0, xattrs=[["user.k", "QUFB" * 2_000_000]]))),
                                        IntegrityError),
    "xattr-name-past-255-bytes": (body(doc(file_entry(uid=0, gid=0, xattrs=[["user." + "k" * 251, "dg=="]]))),
                                  IntegrityError),
    "xattr-names-past-the-64-KiB-list": (body(doc(file_entry(uid=0, gid=0, xattrs=[
        [f"user.{i:0250}", "dg=="] for i in range(300)]))), IntegrityError),
    "xattr-name-a-lone-surrogate": (body(doc(file_entry(uid=0, gid=0, xattrs=[["user.\ud800", "dg=="]]))),
                                    IntegrityError),
    "xattr-value-not-base64-and-huge": (body(doc(file_entry(uid=0, gid=0, xattrs=[["user.k", "!" * 1_000_000]]))),
                                        IntegrityError),
    "uid-a-huge-string": (body(doc(file_entry(uid=HUGE))), IntegrityError),
    "extents-a-huge-string": (body(doc(file_entry(extents=HUGE))), IntegrityError),
    "an-extent-a-huge-list": (body(doc(file_entry(extents=[[0] * 1_000_000]))), IntegrityError),
    "duplicate-key-last-one-invalid": (body(doc(file_entry())).replace(b'"mode": 420', b'"mode": 420, "mode": -1'),
                                       IntegrityError),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_manifest_is_refused_by_a_named_error_with_a_short_message(case: str) -> None:
    data, expected = HOSTILE[case]
    assert isinstance(refusal(data), expected)


def test_with_a_repeated_key_the_last_value_is_the_one_validated_and_used() -> None:
    # Python's json (and jq) keep the last of repeated keys; what is validated is what is used, so a
    # reader of the bytes who keeps the first sees another value but never one that escaped a check.
    data = body(doc(file_entry())).replace(b'"mode": 420', b'"mode": -1, "mode": 420')
    assert parse_both(data, where="m").entries[1].mode == 0o644


def test_a_name_from_a_non_utf8_filesystem_still_reads() -> None:
    # os.fsdecode turns the byte 0xe9 of a Latin-1 name into the surrogate \udce9: that one encodes back.
    name = "caf\udce9"
    parsed = parse_both(body(doc(file_entry(path=name, uid=0, gid=0, xattrs=[[f"user.{name}", "dg=="]]))), where="m")
    assert parsed.entries[1].path == name and parsed.entries[1].xattrs == ((f"user.{name}", b"v"),)


def test_a_source_ctime_out_of_the_ns_range_is_not_kept() -> None:
    # The ctime is context for a diagnosis, never restored: a non-integer was always dropped; so is
    # an integer no filesystem's 64-bit ns could hold (a 4000-digit one would print as 4000 digits).
    data = with_raw(doc(file_entry(source_ctime_ns="@")), "@", b"9" * 4000)
    assert parse_both(data, where="m").entries[1].ctime_ns is None


_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**70)
            | st.integers(max_value=-(2**62)) | st.floats(allow_nan=True, allow_infinity=True)
            | st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
            | st.sampled_from(["file", "dir", "symlink", ".", "a", "..", "a/b", SHA, "user.k", "dg==", FORMAT]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
_KEYS = st.sampled_from(["path", "kind", "mode", "mtime_ns", "atime_ns", "size", "sha256", "target", "uid", "gid",
                         "xattrs", "hardlink", "extents", "flags", "source_ctime_ns", "x"])
_TOP_KEYS = st.sampled_from(["format", "name", "entries", "source_read_noatime", "x"])


@given(data=st.data())
def test_any_edit_of_a_valid_manifest_parses_or_is_a_named_error(data: st.DataObject) -> None:
    document = doc(file_entry(uid=0, gid=0, xattrs=[["user.k", "dg=="]], extents=[[0, 6]]),
                   {**root_entry(), "path": "d"}, {**root_entry(), "path": "d/l", "kind": "symlink", "mode": 0o777,
                                                   "target": "../a"},
                   file_entry(path="d/h", hardlink="a"))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        where = data.draw(st.sampled_from(["top", "entry", "whole-entry", "delete"]))
        if where == "top":
            document[data.draw(_TOP_KEYS)] = data.draw(_VALUES)
            continue
        entries = document.get("entries")
        if not isinstance(entries, list) or not entries:
            continue
        index = data.draw(st.integers(min_value=0, max_value=len(entries) - 1))
        if where == "whole-entry":
            entries[index] = data.draw(_VALUES)
        elif isinstance(entries[index], dict):
            key = data.draw(_KEYS)
            if where == "delete":
                entries[index].pop(key, None)
            else:
                entries[index][key] = data.draw(_VALUES)
    try:
        parse_both(json.dumps(document).encode(), where="m")
    except NAMED as err:
        assert len(str(err)) <= MESSAGE_LIMIT


@given(cut=st.integers(min_value=0, max_value=400), insert=st.binary(max_size=8) | st.sampled_from(
    [b"[", b"{", b"]", b"}", b"NaN", b"1e999", b"-0", b"\\ud800", b"\"", b",", b"\x00", b"\xff", BIG_INT]))
def test_any_spliced_bytes_parse_or_are_a_named_error(cut: int, insert: bytes) -> None:
    original = body(doc(file_entry(uid=0, gid=0, xattrs=[["user.k", "dg=="]])))
    try:
        parse_both(original[:cut] + insert + original[cut:], where="m")
    except NAMED as err:
        assert len(str(err)) <= MESSAGE_LIMIT


# --- the size limit's setting -------------------------------------------------------------------------

def test_the_manifest_size_limit_is_the_documented_default_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", raising=False)
    assert manifest_module.manifest_size_limit() == manifest_module.MAX_MANIFEST_BYTES == 128 << 20
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", "")
    assert manifest_module.manifest_size_limit() == manifest_module.MAX_MANIFEST_BYTES
    for text, value in (("1", 1), ("4096", 4096), (" 1073741824\n", 1 << 30), (str(2**40), 2**40)):
        monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", text)
        assert manifest_module.manifest_size_limit() == value


@pytest.mark.parametrize("text", ["0", "000", "-1", "abc", "1.5", "1e6", "512M", "1_000", "٣", "+5", " "])
def test_a_manifest_size_limit_that_is_not_a_positive_whole_number_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", text)
    with pytest.raises(ManifestLimitError, match="ARTIFACTKIT_MAX_MANIFEST_BYTES") as caught:
        manifest_module.manifest_size_limit()
    assert caught.value.setting == "ARTIFACTKIT_MAX_MANIFEST_BYTES"

"""Manifests as untrusted input: whatever bytes a writer of the store forges, parsing them is bounded work
and ends in a named error, never a RecursionError, TypeError or an hour of hashing zeros (issue 23).

The format side only: what ``parse_manifest`` accepts is self-consistent and within documented bounds
(``artifactkit.store.manifest_limits``); checking a claimed size against the blob is the download's job.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit import IntegrityError, Store, TimestampNotRepresentable, UnsafePathError
from artifactkit.errors import ManifestLimitError
from artifactkit.metadata.model import FileMeta
from artifactkit.store import manifest as manifest_module
from artifactkit.store import manifest_limits
from artifactkit.store.manifest import FORMAT, Manifest, encode_entry, parse_manifest
from artifactkit.store.scan import capture_tree
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind

NAMED = (IntegrityError, UnsafePathError, ManifestLimitError, TimestampNotRepresentable)
#: No refusal may carry the hostile value whole: a 100 MB path must not become a 100 MB message.
MESSAGE_LIMIT = 2000
T = 1_600_000_000_000_000_000
DATA = b"hello\n"
SHA = hashlib.sha256(DATA).hexdigest()
DEEP = 100_000


def root_entry() -> dict[str, Any]:
    return {"path": ".", "kind": "dir", "mode": 0o755, "mtime_ns": T, "atime_ns": T}


def file_entry(**changes: Any) -> dict[str, Any]:
    return {"path": "a", "kind": "file", "mode": 0o644, "mtime_ns": T, "atime_ns": T, "size": len(DATA),
            "sha256": SHA, **changes}


def doc(*entries: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"format": FORMAT, "name": "demo", "source_read_noatime": True,
            "entries": [root_entry(), *(entries or [file_entry()])], **top}


def body(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def with_raw(document: dict[str, Any], marker: str, raw: bytes) -> bytes:
    """``document`` with the JSON value ``"marker"`` replaced by ``raw`` bytes (what json.dumps cannot write)."""
    return body(document).replace(json.dumps(marker).encode(), raw)


def refusal(data: bytes) -> BaseException:
    """The named error ``parse_manifest`` raises for ``data``, checked to be short enough for a person."""
    with pytest.raises(NAMED) as caught:
        parse_manifest(data, where="m")
    assert len(str(caught.value)) <= MESSAGE_LIMIT, str(caught.value)[:300]
    return caught.value


# --- 1. bounded nesting -------------------------------------------------------------------------------

DEEP_PLACES = {
    "top-level-key": lambda raw: with_raw(doc(x="@"), "@", raw),
    "unknown-entry-key": lambda raw: with_raw(doc(file_entry(x="@")), "@", raw),
    "known-entry-field": lambda raw: with_raw(doc(file_entry(mode="@")), "@", raw),
    "inside-an-xattr": lambda raw: with_raw(doc(file_entry(uid=0, gid=0, xattrs=[["user.k", "@"]])), "@", raw),
    "inside-extents": lambda raw: with_raw(doc(file_entry(extents=["@"])), "@", raw),
    "as-an-entry": lambda raw: body(doc(file_entry(), "@")).replace(b'"@"', raw),
}


@pytest.mark.parametrize("place", sorted(DEEP_PLACES))
def test_a_manifest_nested_100000_levels_deep_is_a_limit_error_not_a_recursion_error(place: str) -> None:
    data = DEEP_PLACES[place](nested(DEEP))
    assert isinstance(refusal(data), ManifestLimitError)


def test_the_nesting_bound_is_the_decoders_and_far_above_what_the_format_uses() -> None:
    err = refusal(DEEP_PLACES["top-level-key"](nested(DEEP)))
    assert isinstance(err, ManifestLimitError) and err.limit == sys.getrecursionlimit() >= 20 * 5
    assert "nest" in str(err)


@pytest.mark.parametrize("place", ["top-level-key", "unknown-entry-key"])
def test_a_value_nested_100_levels_under_a_key_the_format_ignores_is_dropped(place: str) -> None:
    # Well inside the decoder's bound: read, then dropped with the document (nothing walks it).
    assert parse_manifest(DEEP_PLACES[place](nested(100)), where="m").entries[1].path == "a"


def test_the_deepest_manifest_the_format_writes_is_read() -> None:
    entry = FileMeta(path="a", kind="file", mode=0o644, size=6, mtime_ns=T, atime_ns=T, sha256=SHA, uid=0, gid=0,
                     xattrs=(("user.k", b"v"),), extents=((0, 1),))
    data = Manifest(name="demo", entries=(FileMeta(path=".", kind="dir", mode=0o755, mtime_ns=T, atime_ns=T),
                                          entry)).to_bytes()
    assert parse_manifest(data, where="m").entries[1] == entry


@pytest.fixture
def forged_store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    """A store (local or S3, by ``kind``) whose ``demo@1`` is one hand-written file and its blob."""
    store = store_of_kind(request.param, request, fast_tmp)
    put_blob(store, SHA, DATA)
    forge_manifest(store, "demo", 1, body(doc()))
    return store


@pytest.mark.parametrize("forged_store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("place", ["top-level-key", "unknown-entry-key"])
def test_download_verify_and_gc_refuse_a_deeply_nested_manifest_by_name(forged_store: Store, fast_tmp: Path,
                                                                        place: str) -> None:
    store = forged_store
    store.download("demo", fast_tmp / "good")  # the store works: what follows is the nesting alone
    forge_manifest(store, "demo", 2, DEEP_PLACES[place](nested(DEEP)))
    with pytest.raises(ManifestLimitError, match="nest"):
        store.download("demo", fast_tmp / "out", version=2)
    assert not (fast_tmp / "out").exists()
    report = store.verify()
    assert not report.ok and any("demo@2" in item and "nest" in item for item in report.unreadable), report
    with pytest.raises(IntegrityError, match="nest"):
        store.gc()
    store.download("demo", fast_tmp / "again", version=1)  # gc removed nothing: version 1 still downloads


# --- 2. extents and sizes -----------------------------------------------------------------------------

def test_any_size_a_linux_file_can_have_is_read_and_one_past_off_t_is_refused() -> None:
    # MAX_LFS_FILESIZE is 2**63-1 (tmpfs, xfs and btrfs allow it): a real file's size must read back.
    for size in (2**62, 2**63 - 1):
        parsed = parse_manifest(body(doc(file_entry(size=size))), where="m")
        assert parsed.entries[1].size == size
        parsed = parse_manifest(body(doc(file_entry(size=size, extents=[[size - 1, 1]]))), where="m")
        assert parsed.entries[1].extents == ((size - 1, 1),)
    for bad in (2**63, 2**64, -1):
        err = refusal(body(doc(file_entry(size=bad))))
        assert isinstance(err, IntegrityError) and "'a'" in str(err) and "size" in str(err)


def _largest_file(path: Path) -> int:
    """Make ``path`` a sparse file as large as its filesystem allows (tmpfs: 2**63-1; ext4: 16 TiB)."""
    size = 2**63 - 1
    with path.open("wb") as handle:
        while True:
            try:
                os.ftruncate(handle.fileno(), size)
            except OSError as err:
                if err.errno != errno.EFBIG:
                    raise
                size //= 2
            else:
                return size


def test_the_largest_sparse_file_this_filesystem_holds_is_a_manifest_entry_its_reader_takes(fast_tmp: Path) -> None:
    (fast_tmp / "tree").mkdir()
    size = _largest_file(fast_tmp / "tree" / "big")
    entries = tuple(attrs.evolve(e, sha256=SHA, extents=()) if e.kind == "file" else e
                    for e in capture_tree(fast_tmp / "tree", hash_content=False))
    assert [e.size for e in entries if e.kind == "file"] == [size]
    parsed = parse_manifest(Manifest(name="demo", entries=entries).to_bytes(), where="m")
    assert parsed.entries == entries


@pytest.mark.parametrize("forged_store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("extents", [[], [[2**63 - 2, 1]]], ids=["all-holes", "one-byte-at-the-end"])
def test_a_forged_size_as_large_as_a_file_can_be_is_refused_against_the_blob_before_any_hashing(
        forged_store: Store, fast_tmp: Path, extents: list[list[int]]) -> None:
    # The parse now takes any size a Linux file can have: what keeps a claim of 2**63-1 bytes of holes from
    # hashing zeros for centuries is the download's and verify's check of the claim against the blob.
    forge_manifest(forged_store, "demo", 2, body(doc(file_entry(size=2**63 - 1, extents=extents))))
    with pytest.raises(IntegrityError, match=str(2**63 - 1)):
        forged_store.download("demo", fast_tmp / "out", version=2)
    assert not (fast_tmp / "out").exists()
    report = forged_store.verify()
    assert not report.ok and any(str(2**63 - 1) in item for item in report.corrupt), report


EXTENT_CASES = {
    "overlapping": [[0, 4], [2, 2]],
    "out-of-order": [[4, 1], [0, 1]],
    "repeated": [[0, 1], [0, 1]],
    "past-the-size": [[0, 7]],
    "starting-past-the-size": [[6, 1]],
    "negative-start": [[-1, 2]],
    "empty-run": [[0, 0]],
    "negative-length": [[3, -1]],
    "three-numbers": [[0, 1, 2]],
    "a-float": [[0, 1.0]],
    "a-bool": [[0, True]],
    "not-a-list": {"0": 1},
    "a-run-not-a-list": [{"start": 0, "length": 1}],
}


@pytest.mark.parametrize("case", sorted(EXTENT_CASES))
def test_inconsistent_extents_are_refused_naming_the_entry_and_the_field(case: str) -> None:
    err = refusal(body(doc(file_entry(extents=EXTENT_CASES[case]))))
    assert isinstance(err, IntegrityError)
    assert "'a'" in str(err) and "extent" in str(err)


def test_more_extents_than_the_documented_bound_are_a_limit_error_naming_the_entry() -> None:
    limit = manifest_limits.MAX_EXTENTS
    runs = [[2 * i, 1] for i in range(limit + 1)]
    err = refusal(body(doc(file_entry(size=2 * len(runs), extents=runs))))
    assert isinstance(err, ManifestLimitError) and err.limit == limit and err.actual == limit + 1
    assert "'a'" in str(err) and "extents" in str(err)
    runs.pop()
    assert len(parse_manifest(body(doc(file_entry(size=2 * len(runs), extents=runs))), where="m").entries[1]
               .extents or ()) == limit


def test_publish_refuses_a_file_with_more_extents_than_a_download_would_read() -> None:
    # encode_entry is what publish writes: it must never write a manifest its own reader refuses.
    limit = manifest_limits.MAX_EXTENTS
    runs = tuple((2 * i, 1) for i in range(limit + 1))
    entry = FileMeta(path="big", kind="file", mode=0o644, size=2 * len(runs), mtime_ns=T, atime_ns=T, sha256=SHA,
                     extents=runs)
    with pytest.raises(ManifestLimitError, match="'big'"):
        encode_entry(entry)


@given(size=st.integers(min_value=0, max_value=64),
       runs=st.lists(st.tuples(st.integers(min_value=-2, max_value=70), st.integers(min_value=-2, max_value=70)),
                     max_size=6))
@example(size=10, runs=[(0, 4), (4, 6)])
def test_accepted_extents_are_sorted_disjoint_inside_the_size_and_sum_to_at_most_it(
        size: int, runs: list[tuple[int, int]]) -> None:
    data = body(doc(file_entry(size=size, extents=[list(run) for run in runs])))
    try:
        extents = parse_manifest(data, where="m").entries[1].extents
    except IntegrityError as err:
        assert "'a'" in str(err) and "extent" in str(err)
        return
    assert extents is not None
    end = 0
    for start, length in extents:
        assert start >= end and length > 0
        end = start + length
    assert end <= size and sum(length for _, length in extents) <= size


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
    "xattrs-an-object": (body(doc(file_entry(uid=0, xattrs={"user.a": "eA=="}))), IntegrityError),
    "xattr-a-huge-list": (body(doc(file_entry(uid=0, xattrs=[[0] * 100_000]))), IntegrityError),
    "xattr-value-past-64-KiB": (body(doc(file_entry(uid=0, xattrs=[
        ["user.k", base64.b64encode(b"v" * (65536 + 1)).decode()]]))), IntegrityError),
    "xattr-value-megabytes-of-base64": (body(doc(file_entry(uid=0, xattrs=[["user.k", "QUFB" * 2_000_000]]))),
                                        IntegrityError),
    "xattr-name-past-255-bytes": (body(doc(file_entry(uid=0, xattrs=[["user." + "k" * 251, "dg=="]]))),
                                  IntegrityError),
    "xattr-names-past-the-64-KiB-list": (body(doc(file_entry(uid=0, xattrs=[
        [f"user.{i:0250}", "dg=="] for i in range(300)]))), IntegrityError),
    "xattr-name-a-lone-surrogate": (body(doc(file_entry(uid=0, xattrs=[["user.\ud800", "dg=="]]))),
                                    IntegrityError),
    "xattr-value-not-base64-and-huge": (body(doc(file_entry(uid=0, xattrs=[["user.k", "!" * 1_000_000]]))),
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
    assert parse_manifest(data, where="m").entries[1].mode == 0o644


def test_a_name_from_a_non_utf8_filesystem_still_reads() -> None:
    # os.fsdecode turns the byte 0xe9 of a Latin-1 name into the surrogate \udce9: that one encodes back.
    name = "caf\udce9"
    parsed = parse_manifest(body(doc(file_entry(path=name, uid=0, xattrs=[[f"user.{name}", "dg=="]]))), where="m")
    assert parsed.entries[1].path == name and parsed.entries[1].xattrs == ((f"user.{name}", b"v"),)


def test_a_source_ctime_out_of_the_ns_range_is_not_kept() -> None:
    # The ctime is context for a diagnosis, never restored: a non-integer was always dropped; so is
    # an integer no filesystem's 64-bit ns could hold (a 4000-digit one would print as 4000 digits).
    data = with_raw(doc(file_entry(source_ctime_ns="@")), "@", b"9" * 4000)
    assert parse_manifest(data, where="m").entries[1].ctime_ns is None


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
        parse_manifest(json.dumps(document).encode(), where="m")
    except NAMED as err:
        assert len(str(err)) <= MESSAGE_LIMIT


@given(cut=st.integers(min_value=0, max_value=400), insert=st.binary(max_size=8) | st.sampled_from(
    [b"[", b"{", b"]", b"}", b"NaN", b"1e999", b"-0", b"\\ud800", b"\"", b",", b"\x00", b"\xff", BIG_INT]))
def test_any_spliced_bytes_parse_or_are_a_named_error(cut: int, insert: bytes) -> None:
    original = body(doc(file_entry(uid=0, xattrs=[["user.k", "dg=="]])))
    try:
        parse_manifest(original[:cut] + insert + original[cut:], where="m")
    except NAMED as err:
        assert len(str(err)) <= MESSAGE_LIMIT


# --- the size limit's setting -------------------------------------------------------------------------

def test_the_manifest_size_limit_is_the_documented_default_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", raising=False)
    assert manifest_module.manifest_size_limit() == manifest_module.MAX_MANIFEST_BYTES == 512 << 20
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

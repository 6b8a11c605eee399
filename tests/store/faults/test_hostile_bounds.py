"""Manifests as untrusted input: whatever bytes a writer of the store forges, parsing them is bounded work
and ends in a named error, never a RecursionError, TypeError or an hour of hashing zeros (issue 23).

The format side only: what ``parse_manifest`` accepts is self-consistent and within documented bounds
(``artifactkit.store.manifest_limits``); checking a claimed size against the blob is the download's job.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit import IntegrityError, Store
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import ManifestLimitError
from artifactkit.metadata.model import FileMeta
from artifactkit.store import manifest_limits
from artifactkit.store.manifest import Manifest, encode_entry
from artifactkit.store.manifest_limits import FILE_BYTES_SETTING
from tests.support.both_parses import parse_both
from tests.support.hostile_manifest import (
    DATA,
    DEEP,
    SHA,
    T,
    body,
    doc,
    file_entry,
    nested,
    refusal,
    with_raw,
)
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind

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
    # 5,000 levels: few enough lists for the manifest's size (its first 64 KiB pay for 8,192); 100,000 are
    # refused before the decoder is reached (test_hostile_memory.py).
    err = refusal(DEEP_PLACES["top-level-key"](nested(5_000)))
    assert isinstance(err, ManifestLimitError) and err.limit == sys.getrecursionlimit() >= 20 * 5
    assert "nest" in str(err)


@pytest.mark.parametrize("place", ["top-level-key", "unknown-entry-key"])
def test_a_value_nested_100_levels_under_a_key_the_format_ignores_is_dropped(place: str) -> None:
    # Well inside the decoder's bound: read, then dropped with the document (nothing walks it).
    assert parse_both(DEEP_PLACES[place](nested(100)), where="m").entries[1].path == "a"


def test_the_deepest_manifest_the_format_writes_is_read() -> None:
    entry = FileMeta(path="a", kind="file", mode=0o644, size=6, mtime_ns=T, atime_ns=T, sha256=SHA, uid=0, gid=0,
                     xattrs=(("user.k", b"v"),), extents=((0, 1),))
    data = Manifest(name="demo", entries=(FileMeta(path=".", kind="dir", mode=0o755, mtime_ns=T, atime_ns=T),
                                          entry)).to_bytes()
    assert parse_both(data, where="m").entries[1] == entry


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

def test_any_size_a_linux_file_can_have_is_read_and_one_past_off_t_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # MAX_LFS_FILESIZE is 2**63-1 (tmpfs, xfs and btrfs allow it): a real file's size must read back where the
    # single-file limit (1 TiB by default: test_hostile_sizes.py) is set that high.
    monkeypatch.setenv(FILE_BYTES_SETTING, str(2**63 - 1))
    for size in (2**62, 2**63 - 1):
        parsed = parse_both(body(doc(file_entry(size=size))), where="m")
        assert parsed.entries[1].size == size
        parsed = parse_both(body(doc(file_entry(size=size, extents=[[size - 1, 1]]))), where="m")
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


def test_the_largest_sparse_file_this_filesystem_holds_is_a_manifest_entry_its_reader_takes(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FILE_BYTES_SETTING, str(2**63 - 1))  # past the 1 TiB default, as a tree of such files needs
    (fast_tmp / "tree").mkdir()
    size = _largest_file(fast_tmp / "tree" / "big")
    entries = tuple(attrs.evolve(e, sha256=SHA, extents=()) if e.kind == "file" else e
                    for e in capture_tree(fast_tmp / "tree", hash_content=False))
    assert [e.size for e in entries if e.kind == "file"] == [size]
    parsed = parse_both(Manifest(name="demo", entries=entries).to_bytes(), where="m")
    assert parsed.entries == entries


@pytest.mark.parametrize("forged_store", STORE_KINDS, indirect=True)
@pytest.mark.parametrize("extents", [[], [[2**63 - 2, 1]]], ids=["all-holes", "one-byte-at-the-end"])
def test_a_forged_size_as_large_as_a_file_can_be_is_refused_against_the_blob_before_any_hashing(
        forged_store: Store, fast_tmp: Path, extents: list[list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    # With the single-file limit set as high as a Linux file goes (by default 1 TiB refuses this claim up front),
    # what keeps a claim of 2**63-1 bytes of holes from hashing zeros for centuries is the download's and
    # verify's check of the claim against the blob.
    monkeypatch.setenv(FILE_BYTES_SETTING, str(2**63 - 1))
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
    assert len(parse_both(body(doc(file_entry(size=2 * len(runs), extents=runs))), where="m").entries[1]
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
        extents = parse_both(data, where="m").entries[1].extents
    except IntegrityError as err:
        assert "'a'" in str(err) and "extent" in str(err)
        return
    assert extents is not None
    end = 0
    for start, length in extents:
        assert start >= end and length > 0
        end = start + length
    assert end <= size and sum(length for _, length in extents) <= size

"""The native core's read-hash-stage against the reference's ``stage_file``, on generated trees: the same
``Staged`` values and byte-identical staged blobs (sparse staying sparse), on 1 and 2 threads."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifactkit.engine.blob_check import blob_lookup
from tests.native.trees import (
    File,
    build,
    names,
    stage_items,
    stage_kept,
    stage_native,
    stage_python,
    staged_files,
    unique,
)
from tests.strategies import timestamps_ns

# A small pool of contents, so equal files (staged once) and already stored blobs come up often.
contents = st.sampled_from([b"", b"x", b"same content\n", bytes(range(256)) * 20, b"\0" * 5000])
files = st.builds(File, path=names, data=contents | st.binary(max_size=9000),
                  mode=st.sampled_from([0o644, 0o400, 0o4755]),
                  times=st.tuples(timestamps_ns, timestamps_ns), hole=st.sampled_from([0, 0, 0, 8192, 1 << 16]),
                  xattrs=st.dictionaries(st.sampled_from(["user.a", "user.é"]), st.binary(max_size=40), max_size=2))


# `work` hands out a fresh directory at every call, so sharing it across examples is safe.
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.lists(files, max_size=8), nested=st.lists(files, max_size=6), stored=st.sets(contents, max_size=2),
       threads=st.sampled_from([1, 2]), split=st.none() | st.integers(0, 14))
def test_native_staging_gives_the_references_results_and_bytes(
        native: ModuleType, work: Callable[[str], Path], *, top: list[File], nested: list[File], stored: set[bytes],
        threads: int, split: int | None) -> None:
    # split: the items in two calls sharing one state, as a publish's batches are.
    src, blobs = work("src"), work("blobs")
    tree = unique(top) + [File(f"sub dir/{f.path}", f.data, f.mode, f.times, f.hole, f.xattrs) for f in unique(nested)]
    build(src, tree, dirs=["sub dir"])
    for data in stored:  # already in the store: not staged again by either engine
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    items = stage_items(src)
    txn_py, txn_native = work("txn-py"), work("txn-native")
    expected = stage_python(src, items, txn_py, blobs)
    assert stage_native(native, src, items, txn_native, blobs, threads=threads, split=split) == expected
    assert staged_files(txn_native) == staged_files(txn_py)
    # A publish's own path: the core's capture staged, its reads kept in the state, the same values and bytes.
    txn_kept = work("txn-kept")
    assert stage_kept(native, src, txn_kept, blobs, threads=threads, split=split) == expected
    assert staged_files(txn_kept) == staged_files(txn_py)


@pytest.mark.parametrize("shared", [True, False], ids=["one-state", "fresh-state-each-call"])
def test_content_staged_by_an_earlier_batch_of_the_publish_is_not_staged_again(
        native: ModuleType, work: Callable[[str], Path], shared: bool) -> None:
    src, blobs = work("src"), work("blobs")
    build(src, [File("a", b"same content\n"), File("b", b"same content\n")])
    items = stage_items(src)
    found = stage_native(native, src, items, work("txn"), blobs, split=1, shared=shared)
    # The control: without the publish's state the second batch cannot know, and stages it again.
    assert [f.staged for f in found] == ([True, False] if shared else [True, True])


def test_a_name_missing_from_the_plans_listing_is_new_to_both_engines(
        native: ModuleType, work: Callable[[str], Path]) -> None:
    # The plan listed blobs/ before another publisher stored this content: both engines stage it again
    # (renamed over the same bytes at commit) rather than asking blobs/ a second time.
    src, blobs, txn = work("src"), work("blobs"), work("txn")
    build(src, [File("a", b"content")])
    items = stage_items(src)
    fd = os.open(blobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        lookup = blob_lookup(fd, len(items))
        assert lookup.names == frozenset()
        (blobs / hashlib.sha256(b"content").hexdigest()).write_bytes(b"content")
        assert not lookup(hashlib.sha256(b"content").hexdigest(), 7)
        found = stage_python(src, items, txn, blobs, lookup=lookup)
    finally:
        os.close(fd)
    assert found[0].staged
    from artifactkit import _native  # the native fixture has skipped where the core is not built

    txn_fd, blobs_fd = (os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (work("txn"), blobs))
    try:
        again = list(native.stage_files(str(src), txn_fd, blobs_fd, items, threads=1,
                                        state=_native.StageState(lookup.names)))
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)
    assert again == found


def test_a_small_file_bigger_than_a_threads_kept_buffer_is_staged_whole(
        native: ModuleType, work: Callable[[str], Path]) -> None:
    # 3 MiB: read from memory (below IN_MEMORY_LIMIT) into a buffer its thread gives back afterwards (above
    # SMALL_KEPT); the length checked and the bytes written are those read, before the buffer goes.
    src, blobs = work("src"), work("blobs")
    build(src, [File("big", bytes(range(256)) * (12 << 10)), File("after", b"next")])
    items = stage_items(src)
    for threads in (1, 2):
        txn_py, txn_native = work("txn-py"), work("txn-native")
        expected = stage_python(src, items, txn_py, blobs)
        assert stage_native(native, src, items, txn_native, blobs, threads=threads) == expected
        assert staged_files(txn_native) == staged_files(txn_py)


@pytest.mark.parametrize("hole", [0, 1 << 20], ids=["dense", "sparse"])
def test_a_file_above_the_in_memory_limit_is_copied_while_hashed_by_both(
        native: ModuleType, work: Callable[[str], Path], hole: int) -> None:
    src, blobs = work("src"), work("blobs")
    big = (b"0123456789abcdef" * 4096) * 130  # 8.1 MiB: above IN_MEMORY_LIMIT, copied into staging
    build(src, [File("big", big, hole=hole), File("copy", big, hole=hole)])
    items = stage_items(src)
    txn_py, txn_native = work("txn-py"), work("txn-native")
    assert stage_native(native, src, items, txn_native, blobs) == stage_python(src, items, txn_py, blobs)
    assert staged_files(txn_native) == staged_files(txn_py)  # the second copy was dropped by both


def test_a_planted_blob_of_the_wrong_size_does_not_count_as_stored(native: ModuleType,
                                                                   work: Callable[[str], Path]) -> None:
    src, blobs = work("src"), work("blobs")
    build(src, [File("a", b"content")])
    (blobs / hashlib.sha256(b"content").hexdigest()).write_bytes(b"truncated")
    items = stage_items(src)
    txn_py, txn_native = work("txn-py"), work("txn-native")
    found = stage_native(native, src, items, txn_native, blobs)
    assert found == stage_python(src, items, txn_py, blobs)
    assert found[0].staged


@pytest.mark.parametrize("threads", [2, 7])
def test_equal_files_read_side_by_side_stage_the_first_and_leave_no_other_copy(
        native: ModuleType, work: Callable[[str], Path], threads: int) -> None:
    # The core writes a new small file's copy as it reads it, claimed by the lowest position so far: two equal
    # files next to each other are read at the same time by two threads, so the later one often claims first
    # and writes a copy that must be dropped, while the first in input order must still write its own and be
    # the one staged, as the reference's single pass decides. Pairs of 64 KiB contents race many times over;
    # empty files, many of them, are what equal content mostly is in real trees.
    src, blobs = work("src"), work("blobs")
    pairs = [File(f"d/p{k:03d}{side}", bytes([k]) * (64 << 10)) for k in range(60) for side in "ab"]
    build(src, pairs + [File(f"e/empty{i:03d}") for i in range(100)], dirs=["d", "e"])
    items = stage_items(src)
    txn_py = work("txn-py")
    expected = stage_python(src, items, txn_py, blobs)
    assert sum(s.staged for s in expected) == 61
    for _ in range(3):
        txn_native = work("txn-native")
        assert stage_native(native, src, items, txn_native, blobs, threads=threads) == expected
        assert staged_files(txn_native) == staged_files(txn_py)

"""The opt-in stat cache: a hit skips the read, and nothing it cannot prove is trusted.

Reads are counted as the kernel sees them, as the opens of the source's files
(``tests/support/opened_files``), so every test here means the same on either engine. The racy window is
set to 0 where a test needs hits and the inode clock is waited on (a condition, not a duration): a file
counts only once the clock has moved past its ctime."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.engine.ports import CachedRead
from artifactkit.manifest.encode import encode_entry
from artifactkit.metadata.model import FileMeta
from artifactkit.store import stat_cache, stat_cache_file
from artifactkit.store.stat_cache import StatCache
from tests.support.hostile_store import blob_exists, remove_blob
from tests.support.inode_clock import settle as _settle
from tests.support.opened_files import OpenedFiles
from tests.support.stat_cache_file import Rows, rewrite_rows
from tests.support.stores import sibling_store, stat_cache_path

FILES = {"a.txt": b"alpha\n", "b.txt": b"bravo\n", "sub/c.bin": bytes(range(256)) * 8, "sub/d.txt": b"delta\n"}


def _tree(root: Path) -> Path:
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture
def reads() -> Iterator[OpenedFiles]:
    """The source files a publish opened (a test watches its tree once it is built)."""
    opened = OpenedFiles()
    yield opened
    opened.close()


@pytest.fixture
def no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)


def _digests(store: Store, ref: Any) -> dict[str, str | None]:
    return {e.path: e.sha256 for e in store.manifest(ref).entries if e.kind == "file"}


def test_a_republish_with_the_stat_cache_reads_no_unchanged_file(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    store = any_store
    first = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == sorted(FILES)
    second = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == []
    assert store.manifest(second).entries == store.manifest(first).entries  # digests, flags, holes: all kept
    store.download(second, fast_tmp / "out")  # every digest verified against the blobs
    assert {rel: (fast_tmp / "out" / rel).read_bytes() for rel in FILES} == FILES


def test_without_the_option_every_file_is_read_even_with_a_cache_present(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    reads.take()
    store.publish(src, "demo")
    assert reads.take() == sorted(FILES)


def _rewrite_same_size_keep_mtime(path: Path) -> None:
    st = path.stat()
    path.write_bytes(path.read_bytes().upper())  # same size; only ctime tells
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _grow(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"more")


def _touch_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))


def _replace_by_another_inode(path: Path) -> None:
    st = path.stat()
    other = path.with_name(path.name + ".new")
    other.write_bytes(path.read_bytes().upper())
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.replace(path)


@pytest.mark.parametrize("change", [_rewrite_same_size_keep_mtime, _grow, _touch_mtime, _replace_by_another_inode])
def test_a_changed_file_misses_and_its_new_content_is_published(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None, change: Any) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    change(src / "a.txt")
    _settle(src)
    reads.take()  # the change's own opens
    ref = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == ["a.txt"]
    store.download(ref, fast_tmp / "out")
    assert (fast_tmp / "out" / "a.txt").read_bytes() == (src / "a.txt").read_bytes()


@pytest.mark.parametrize("field", ["dev", "ino", "size", "mtime_ns", "ctime_ns"])
def test_a_lookup_misses_when_any_one_of_the_five_values_differs(field: str) -> None:
    entry = FileMeta(path="f", kind="file", mode=0o644, mtime_ns=10, atime_ns=10, size=3, ctime_ns=20, uid=0, gid=0,
                     sha256="0" * 64, flags=7)
    identity = (7, 8)
    recorder = StatCache({}, trusted_before_ns=0, started_ns=0)
    recorder.record(entry, identity, encode_entry(entry))
    cache = StatCache(recorder.recorded, trusted_before_ns=100, started_ns=0)
    assert cache.lookup(entry, identity) == CachedRead("0" * 64, 7, None)
    changed = {"dev": ((9, 8), entry), "ino": ((7, 9), entry)}.get(field)
    if changed is None:
        changed = (identity, attrs.evolve(entry, **{field: {"size": 4, "mtime_ns": 11, "ctime_ns": 21}[field]}))
    assert cache.lookup(changed[1], changed[0]) is None


def test_a_racily_clean_entry_is_hashed_again(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    newest = max(os.lstat(p).st_ctime_ns for p in src.rglob("*"))
    store = any_store
    # The recording publish "started" in the tick of the newest change: a later write in that same
    # tick would leave every value as recorded, so those entries must not be trusted.
    reads.watch(src)
    with monkeypatch.context() as patch:
        patch.setattr("artifactkit.store.store.inode_clock_ns", lambda: newest)
        store.publish(src, "demo", stat_cache=True)
    reads.take()
    store.publish(src, "demo", stat_cache=True)
    racy = {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() and p.lstat().st_ctime_ns >= newest}
    assert racy and set(reads.take()) == racy
    store.publish(src, "demo", stat_cache=True)  # recorded again by a publish that started later: trusted now
    assert reads.take() == []


def test_the_default_window_rehashes_files_changed_just_before_the_recording_publish(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles) -> None:
    src = _tree(fast_tmp / "src")
    reads.watch(src)
    store = any_store
    store.publish(src, "demo", stat_cache=True)  # files written moments ago: inside the 2 s window
    reads.take()
    store.publish(src, "demo", stat_cache=True)
    assert reads.take() == sorted(FILES)


def _swap_two_digests(cache: Path, _other_cache: Path) -> None:
    def swap(rows: Rows) -> None:
        files = [row for row in rows if row[2] != "-"]
        files[0][2], files[1][2] = files[1][2], files[0][2]

    rewrite_rows(cache, swap, checksum=False)  # the checksum no longer matches


def _garbage(cache: Path, _other_cache: Path) -> None:
    cache.write_bytes(b"\x00not json{")


def _truncated(cache: Path, _other_cache: Path) -> None:
    cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])


def _symlink(cache: Path, _other_cache: Path) -> None:
    real = cache.with_name("elsewhere.json")
    cache.replace(real)
    cache.symlink_to(real.name)


def _from_another_store(cache: Path, other_cache: Path) -> None:
    shutil.copy(other_cache, cache)  # a valid cache, of the same files, for another store


def _deeply_nested_header(cache: Path, _other_cache: Path) -> None:
    cache.write_bytes(b"[" * 100_000 + b"\n")  # json.loads raises RecursionError, before any checksum


@pytest.mark.parametrize("spoil", [_swap_two_digests, _garbage, _truncated, _symlink, _from_another_store,
                                   _deeply_nested_header])
def test_a_corrupt_or_foreign_cache_is_ignored_and_every_file_hashed(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None, spoil: Any) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    store, other = any_store, sibling_store(any_store, "other")
    expected = _digests(store, store.publish(src, "demo", stat_cache=True))
    other.publish(src, "demo", stat_cache=True)
    spoil(stat_cache_path(store), stat_cache_path(other))
    reads.take()
    ref = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == sorted(FILES)
    assert _digests(store, ref) == expected


def test_a_cached_digest_whose_blob_gc_removed_is_read_and_stored_again(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    store = any_store
    ref = store.publish(src, "demo", stat_cache=True)
    blob = _digests(store, ref)["a.txt"]
    assert blob is not None
    remove_blob(store, blob)  # as if an older store had lost it
    reads.take()
    store.publish(src, "demo", stat_cache=True)
    assert reads.take() == ["a.txt"]
    assert blob_exists(store, blob)


def test_cli_publish_takes_stat_cache(fast_tmp: Path, any_store: Store, reads: OpenedFiles, no_window: None) -> None:
    src = _tree(fast_tmp / "src")
    _settle(src)
    reads.watch(src)
    args = ["publish", str(src), "--store", str(any_store.root), "--name", "demo", "--stat-cache"]
    assert main(args) == 0
    assert reads.take() == sorted(FILES)
    assert main(args) == 0
    assert reads.take() == []


def _odd_cache() -> tuple[list[str], StatCache]:
    odd = ["plain", "tab\there", "new\nline", 'quo"te', "caf\u00e9", "bad\udcffbyte", "."]
    cache = StatCache({}, trusted_before_ns=0, started_ns=0)
    for number, path in enumerate(odd):
        entry = FileMeta(path=path, kind="file", mode=0o644, mtime_ns=number, atime_ns=1, size=3, ctime_ns=2,
                         uid=0, gid=0, sha256=f"{number:064x}")
        cache.record(entry, (1, number), encode_entry(entry))
    return odd, cache


def test_a_body_reads_back_every_row_whatever_its_path() -> None:
    _, cache = _odd_cache()
    assert len(cache.recorded) == 7
    assert stat_cache_file.parse_rows(stat_cache_file.body_of(cache.recorded)) == cache.recorded


def test_a_row_with_a_malformed_digest_is_left_out_and_the_rest_kept() -> None:
    odd, cache = _odd_cache()
    parts = stat_cache_file.body_of(cache.recorded).split("\t")
    for bad in ("../../etc/passwd", "A" * 64, "0" * 63, ""):
        spoiled = [*parts[:8], bad, *parts[9:]]  # the first row's digest: after the paths and 7 fields
        kept = {p: r for p, r in cache.recorded.items() if p != odd[0]}
        assert stat_cache_file.parse_rows("\t".join(spoiled)) == kept


def test_an_inode_lookup_takes_only_fields_as_record_writes_them() -> None:
    _, cache = _odd_cache()
    rows = cache.recorded
    fields, sha, rest = rows["plain"]
    for variant, hits in ((fields, True), (fields.upper(), False), (f" {fields}", False), (f"{fields}\n", False)):
        found = stat_cache._inode_index({"plain": (variant, sha, rest)})
        assert bool(found) is hits, variant


def test_malformed_fields_are_kept_as_text_no_lstat_packs_to() -> None:
    odd, cache = _odd_cache()
    parts = stat_cache_file.body_of(cache.recorded).split("\t")
    for bad in ("x y z", parts[1].upper(), parts[1][:-2] + "  "):
        rows = stat_cache_file.parse_rows("\t".join([parts[0], bad, *parts[2:]]))
        assert rows[odd[0]][0] == bad and {p: r for p, r in rows.items() if p != odd[0]} == {
            p: r for p, r in cache.recorded.items() if p != odd[0]}


@pytest.mark.parametrize("spoil", [
    lambda parts: parts[:-2] + parts[-1:],  # a part short: no column lines up
    lambda parts: [*parts[:-1], "extra", parts[-1]],  # a part too many
    lambda parts: [*parts[:-1], "no newline"],
    lambda parts: ["[not json", *parts[1:]],
    lambda parts: ['["a", 1, "b", "c", "d", "e", "f"]', *parts[1:]],  # a path that is not a string
    lambda parts: ['{"a": 1}', *parts[1:]],
    lambda parts: [*parts[:-2], parts[-2].replace("}", "}\n", 1), parts[-1]],  # a newline inside a rest
])
def test_a_body_whose_parts_do_not_add_up_is_ignored_whole(spoil: Any) -> None:
    _, cache = _odd_cache()
    assert stat_cache_file.parse_rows("\t".join(spoil(stat_cache_file.body_of(cache.recorded).split("\t")))) == {}


@pytest.mark.parametrize(("shas", "valid"), [
    (["0" * 64, "-", "f" * 64], True), ([], True), (["A" * 64], False), (["-" * 64], False), (["a", "-"], False),
    (["0" * 63, "0" * 65], False), (["g" * 64], False), (["0" * 63 + "-", "-"], False), (["--"], False),
])
def test_digests_are_checked_whole_exactly_as_one_regex_per_item_would(shas: list[str], valid: bool) -> None:
    assert stat_cache_file.digests_or_none(shas) is valid
    assert all(re.fullmatch("[0-9a-f]{64}|-", sha) for sha in shas) is valid

"""An unchanged tree: its listings match the cache whole, and the recorded version's manifest is committed again.

The check behind every test is the one of ``test_stat_cache_entries``: the cached publish's digest equals an
uncached publish's. The reuse is seen by what it skips: no manifest is built (``publish.manifest_bytes``) and
no recorded line is read (``stat_cache_file.parse_rows``). Each refusal below is a guard the reuse needs; one
test takes the head check away and shows the digest check then fails.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.engine.reference import scan
from artifactkit.store import publish, stat_cache, stat_cache_file
from tests.support.inode_clock import settle as _settle
from tests.support.opened_files import files_opened
from tests.support.stat_cache_file import body_of, rewrite_rows
from tests.support.stat_cache_tree import rich_tree
from tests.support.stores import stat_cache_path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """What a publish listed the xattrs of, built a manifest of, and parsed recorded lines of; which files it
    read (opened) the kernel tells :func:`_cached_then_uncached`, on either engine."""
    seen: dict[str, list[str]] = {"xattrs": [], "manifest": [], "lines": []}

    def counted(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(first: Any, *args: Any, **kwargs: Any) -> Any:
            seen[kind].append(os.path.basename(os.fspath(first)) if kind == "xattrs" else kind)
            return real(first, *args, **kwargs)
        return call
    monkeypatch.setattr(scan, "read_xattrs", counted("xattrs", scan.read_xattrs))
    monkeypatch.setattr(publish, "sorted_lines", counted("manifest", publish.sorted_lines))
    monkeypatch.setattr(stat_cache_file, "parse_rows", counted("lines", stat_cache_file.parse_rows))
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)
    return seen


@pytest.fixture
def settled(fast_tmp: Path) -> tuple[Store, Path]:
    """A store whose cache describes the tree as it is: the first publish's readlink moved the link's atime
    (relatime), and the second recorded that."""
    src = rich_tree(fast_tmp / "src", hard_link=False)
    store = Store(fast_tmp / "store")
    store.publish(src, "demo", stat_cache=True)
    store.publish(src, "demo", stat_cache=True)
    return store, src


def _cached_then_uncached(store: Store, src: Path, calls: dict[str, list[str]], name: str = "demo") -> Any:
    for seen in calls.values():
        seen.clear()
    with files_opened(src) as opened:
        cached = store.publish(src, name, stat_cache=True)
        read = sorted(os.path.basename(path) for path in opened.take())
    did = {"read": read, **{kind: sorted(seen) for kind, seen in calls.items()}}
    uncached = store.publish(src, name)
    assert cached.digest == uncached.digest, "the cached publish wrote another manifest than a full capture"
    return cached, did


def test_an_unchanged_tree_commits_the_recorded_manifest_again(
        settled: tuple[Store, Path], calls: dict[str, list[str]]) -> None:
    store, src = settled
    before = store.resolve("demo")
    cached, did = _cached_then_uncached(store, src, calls)
    assert did == {"read": [], "xattrs": [], "manifest": [], "lines": []}
    assert (cached.version, cached.digest) == (before.version + 1, before.digest)
    assert store.manifest(cached).to_bytes() == store.manifest(before).to_bytes()


def _recorded_manifest_edited(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = store.layout.manifest_path(store.resolve("demo"))
    os.chmod(path, 0o644)
    data = bytearray(Path(path).read_bytes())
    data[data.index(b'"mode": ') + 8] ^= 1  # one digit of one mode: the bytes no longer hash to the name
    Path(path).write_bytes(bytes(data))


def _recorded_manifest_removed(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.unlink(store.layout.manifest_path(store.resolve("demo")))


def _recorded_manifest_a_fifo(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = store.layout.manifest_path(store.resolve("demo"))
    os.unlink(path)
    os.mkfifo(path)  # opened as a plain read, this would hang the publish: refused, never waited on


def _blob_removed(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = {e.path: e.sha256 for e in store.manifest("demo").entries}["sub/c.bin"]
    assert blob is not None
    os.unlink(store.layout.blob_path(blob))


def _file_removed(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (src / "sub" / "deep" / "d.txt").unlink()


def _file_added(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (src / "sub" / "deep" / "e.txt").write_bytes(b"echo\n")


def _atime_moved(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.lstat(src / "a.txt")
    (src / "a.txt").read_bytes()  # relatime: an atime older than the mtime moves on a read, ctime stays
    after = os.lstat(src / "a.txt")
    assert (after.st_atime_ns != before.st_atime_ns, after.st_ctime_ns) == (True, before.st_ctime_ns), "premise"


def _listed_without_noatime(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader who may not use O_NOATIME: the manifest says so, and the recorded one says otherwise. Made by
    # patching the reference scan, so the full capture it is compared with must be the reference's too (on
    # the native engine it is the core's, unpatched). The core's own fallback (native/src/scan/walk.rs) is not
    # provoked by any test yet: as root O_NOATIME never fails, and the user's native run has no mounts.
    monkeypatch.setenv("ARTIFACTKIT_ENGINE", "python")
    real = scan.open_noatime
    monkeypatch.setattr(scan, "open_noatime", lambda *args: (real(*args)[0], False))


def _fields_not_fixed_width(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def spoil(rows: list[list[str]]) -> None:
        rows[0][1] += "0"  # one row of fields a digit too long: the column is compared row by row only
    rewrite_rows(stat_cache_path(store), spoil)


@pytest.mark.parametrize(("change", "read"), [
    (_recorded_manifest_edited, []), (_recorded_manifest_removed, []), (_recorded_manifest_a_fifo, []),
    (_blob_removed, ["c.bin"]),
    (_file_removed, []), (_file_added, ["e.txt"]), (_atime_moved, []), (_listed_without_noatime, []),
    (_fields_not_fixed_width, []),
])
def test_what_is_not_the_recorded_version_builds_its_own_manifest(
        settled: tuple[Store, Path], calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch,
        change: Callable[[Store, Path, pytest.MonkeyPatch], None], read: list[str]) -> None:
    store, src = settled
    change(store, src, monkeypatch)
    _settle(src)
    _, did = _cached_then_uncached(store, src, calls)
    assert did["manifest"] == ["manifest"], "the recorded manifest was committed for a tree it does not describe"
    assert did["read"] == read


def test_a_publish_under_another_name_writes_that_name(
        settled: tuple[Store, Path], calls: dict[str, list[str]]) -> None:
    store, src = settled
    ref, did = _cached_then_uncached(store, src, calls, name="other")
    assert did["manifest"] == ["manifest"] and store.manifest(ref).name == "other"


def test_without_the_head_check_a_listing_without_noatime_would_get_the_recorded_manifest(
        settled: tuple[Store, Path], calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard taken away on purpose: a head check that accepts any head. The digest check then fails.
    store, src = settled
    monkeypatch.setattr(stat_cache, "manifest_head", lambda name, noatime: b"")
    _listed_without_noatime(store, src, monkeypatch)
    with pytest.raises(AssertionError, match="another manifest than a full capture"):
        _cached_then_uncached(store, src, calls)


def _listings(src: Path) -> list[tuple[list[str], list[os.stat_result]]]:
    """The tree's listings in scan order, as the scan hands them to the cache (the root first, alone)."""
    found = [(["."], [os.lstat(src)])]
    pending = [""]
    while pending:
        rel = pending.pop(0)
        names = sorted(os.listdir(src / rel))
        relpaths = [f"{rel}/{name}" if rel else name for name in names]
        found.append((relpaths, [os.lstat(src / path) for path in relpaths]))
        pending[:0] = [path for path in relpaths if (src / path).is_dir() and not (src / path).is_symlink()]
    return found


@pytest.mark.parametrize("odd", ["entry-gone", "entry-extra"])
def test_the_recorded_manifest_needs_every_row_and_every_entry_matched(
        settled: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch, odd: str) -> None:
    # A removed or added entry moves its directory's ctime, so its parent's listing does not match. A
    # filesystem that keeps no ctime would not: the counts still refuse. Listings are handed in by hand here.
    store, src = settled
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)

    def unchanged(drop_last: bool, extra: int) -> bool:
        cache = store.backend.stat_cache(stat_cache.inode_clock_ns())
        listings = _listings(src)
        for relpaths, stats in listings:
            if drop_last and relpaths == ["sub/deep/d.txt"]:
                continue  # as if d.txt were gone and its directory's times as they were
            assert cache.match_listing(relpaths, stats)
        count = sum(len(relpaths) for relpaths, _ in listings) - drop_last + extra
        with store.backend.open() as opened:
            return cache.unchanged_manifest(lambda ref: opened.manifest_bytes(ref)[0], "demo", count, True,
                                            lambda sha, size: True) is not None

    assert unchanged(False, 0)
    assert not (unchanged(True, 0) if odd == "entry-gone" else unchanged(False, 1))


def test_rests_that_fail_their_checksum_make_a_matched_listing_capture_again(
        settled: tuple[Store, Path], calls: dict[str, list[str]]) -> None:
    # The rests are checked only when a line is needed: a change elsewhere needs the matched listings' lines.
    store, src = settled
    cache = stat_cache_path(store)
    data = bytearray(cache.read_bytes())
    data[-3] ^= 0x20  # inside the last rest: its checksum no longer holds, the one before the rests still does
    cache.write_bytes(bytes(data))
    os.chmod(src / "a.txt", 0o600)
    _settle(src)
    _, did = _cached_then_uncached(store, src, calls)
    # a.txt changed, so the root's listing is decided entry by entry: without rests, nothing there is a hit.
    # sub's and deep's listings matched whole, but their entries have no line to give: captured again, the
    # directory's flags and all, and read.
    assert did["read"] == ["a.txt", "c.bin", "d.txt", "sparse"] and did["manifest"] == ["manifest"]


def _edit_header(store: Store, **values: Any) -> None:
    cache = stat_cache_path(store)
    head, _, body = cache.read_bytes().partition(b"\n")
    cache.write_bytes(json.dumps({**json.loads(head), **values}, sort_keys=True).encode() + b"\n" + body)


def test_a_version_pointer_edited_without_its_checksum_makes_the_cache_corrupt(
        fast_tmp: Path, calls: dict[str, list[str]]) -> None:
    # Pointing the cache at an older version of the name would commit that version's tree: the header is
    # under the checksum, so the whole cache is ignored instead.
    src = rich_tree(fast_tmp / "src", hard_link=False)
    store = Store(fast_tmp / "store")
    older = store.publish(src, "demo", stat_cache=True)
    (src / "a.txt").write_bytes(b"ALPHA\n")
    _settle(src)
    store.publish(src, "demo", stat_cache=True)
    store.publish(src, "demo", stat_cache=True)
    _edit_header(store, version=[older.name, older.version, older.digest])
    _, did = _cached_then_uncached(store, src, calls)
    assert did["read"] == ["a.txt", "c.bin", "d.txt", "sparse"]


@pytest.mark.parametrize("paths", ['[".",', '[["a"]'], ids=["not-json", "not-a-string"])
def test_a_checksummed_cache_with_odd_paths_is_ignored_not_a_crash(
        settled: tuple[Store, Path], calls: dict[str, list[str]], paths: str) -> None:
    store, src = settled

    def spoil(rows: list[list[str]]) -> bytes:
        return body_of(rows).replace(b'["."', paths.encode(), 1)
    rewrite_rows(stat_cache_path(store), spoil)
    _, did = _cached_then_uncached(store, src, calls)
    assert did["read"] == ["a.txt", "c.bin", "d.txt", "sparse"]


def test_a_tree_published_under_another_name_is_reused_under_that_name_next_time(
        settled: tuple[Store, Path], calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, src = settled
    _, did = _cached_then_uncached(store, src, calls, name="other")
    assert did["manifest"] == ["manifest"]  # the recorded manifest says "demo"
    _, did = _cached_then_uncached(store, src, calls, name="other")
    assert did["manifest"] == []  # the cache now names the version of "other"
    _listed_without_noatime(store, src, monkeypatch)
    _, did = _cached_then_uncached(store, src, calls, name="other")
    assert did["manifest"] == ["manifest"]
    _, did = _cached_then_uncached(store, src, calls, name="other")
    assert did["manifest"] == []  # a reader without O_NOATIME: the version it wrote says so


def test_a_checksummed_body_nested_thousands_deep_is_ignored_not_a_crash(
        settled: tuple[Store, Path], calls: dict[str, list[str]]) -> None:
    # Rests starting at 0: the paths are parsed only with the rests, where a deep array once raised RecursionError.
    store, src = settled
    cache = stat_cache_path(store)
    body = b"[" * 100_000 + b"\t\n"
    fields = {**json.loads(cache.read_bytes().partition(b"\n")[0]), "rests_at": 0,
              "rests_sha256": hashlib.sha256(body).hexdigest()}
    fields["sha256"] = stat_cache_file.checksum(fields, b"")
    cache.write_bytes(json.dumps(fields, sort_keys=True).encode() + b"\n" + body)
    _, did = _cached_then_uncached(store, src, calls)
    assert did["read"] == ["a.txt", "c.bin", "d.txt", "sparse"]


def test_a_failure_to_write_the_cache_does_not_fail_the_committed_publish(
        settled: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, src = settled
    (src / "a.txt").write_bytes(b"ALPHA\n")  # a change: the cache is written after the commit

    def full(rows: Any) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(stat_cache_file, "body_of", full)  # only the write lays a body out
    ref = store.publish(src, "demo", stat_cache=True)
    assert store.resolve("demo") == ref


def test_a_reader_in_thousands_of_groups_still_loads_its_cache(
        settled: tuple[Store, Path], calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    # The header must fit the one read that takes it: 9,000 groups once made it 72 KB, and no cache ever loaded.
    store, src = settled
    real = stat_cache_file.reader_identity()
    groups = list(range(100_000, 109_000))
    monkeypatch.setattr(stat_cache_file, "reader_identity", lambda: [*real[:2], groups, *real[3:]])
    (src / "a.txt").write_bytes(b"ALPHA\n")
    _settle(src)
    store.publish(src, "demo", stat_cache=True)  # recorded by this reader
    _, did = _cached_then_uncached(store, src, calls)
    assert did["read"] == [] and did["manifest"] == []


def test_a_time_no_row_can_hold_is_a_miss_captured_as_without_the_cache(fast_tmp: Path) -> None:
    # A directory moved in over a recorded path keeps its file's ctime (old enough to be trusted); that file's
    # mtime is before 1677, which the packed row cannot hold (the manifest can): a miss, captured afresh.
    src, outside = fast_tmp / "src", fast_tmp / "outside"
    (src / "A").mkdir(parents=True)
    (src / "A" / "f").write_bytes(b"x\n")
    (outside / "B").mkdir(parents=True)
    (outside / "B" / "f").write_bytes(b"y\n")
    os.utime(outside / "B" / "f", ns=(10**18, -(2**63) - 10**9))
    store = Store(fast_tmp / "store")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stat_cache, "RACY_WINDOW_NS", 0)
        _settle(fast_tmp)
        store.publish(src, "demo", stat_cache=True)
        os.rename(src / "A", outside / "A.old")
        os.rename(outside / "B", src / "A")
        _settle(src)
        refs = [store.publish(src, "demo", stat_cache=cached) for cached in (True, False)]
    assert refs[0].digest == refs[1].digest
    assert {e.path: e.mtime_ns for e in store.manifest(refs[0]).entries}["A/f"] == -(2**63) - 10**9


def test_a_matched_directory_captured_again_keeps_the_atime_from_before_its_listing(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rests unreadable, so a matched listing's entries are captured again, after the scan listed them. A reader
    # without O_NOATIME moves a fresh directory's atime by listing it (relatime: while atime <= mtime); the
    # manifest must hold the atime from before, as an uncached publish would. Nothing here lists the tree but
    # the publishes (_settle would: it waits with lstat only).
    src = fast_tmp / "src"
    (src / "P" / "D").mkdir(parents=True)
    (src / "P" / "D" / "f").write_bytes(b"f\n")
    (src / "a.txt").write_bytes(b"a\n")
    paths = [src, src / "P", src / "P" / "D", src / "P" / "D" / "f", src / "a.txt"]

    def settle_unlisted() -> None:
        newest = max(os.lstat(path).st_ctime_ns for path in paths)
        while stat_cache.inode_clock_ns() <= newest:
            os.sched_yield()
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)
    settle_unlisted()
    store = Store(fast_tmp / "store")
    store.publish(src, "demo", stat_cache=True)  # with O_NOATIME: D's atime stays where it was
    cache = stat_cache_path(store)
    data = bytearray(cache.read_bytes())
    data[-3] ^= 0x20  # the rests no longer hold their checksum
    cache.write_bytes(bytes(data))
    os.chmod(src / "a.txt", 0o600)  # the root's listing is decided entry by entry; P's listing [P/D] matches
    settle_unlisted()
    before = os.lstat(src / "P" / "D").st_atime_ns
    real = scan.open_noatime
    monkeypatch.setattr(scan, "open_noatime", lambda path, flags, **kw: (
        os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, **kw), False))
    ref = store.publish(src, "demo", stat_cache=True)
    monkeypatch.setattr(scan, "open_noatime", real)
    assert os.lstat(src / "P" / "D").st_atime_ns != before, "premise: the listing moved D's atime"
    assert {e.path: e.atime_ns for e in store.manifest(ref).entries}["P/D"] == before

"""The stat cache's entry hits: an unchanged entry's manifest line is reused with a fresh atime, and
a cached publish writes exactly the manifest an uncached one would.

The check behind every test here is the strongest one available: the cached publish's manifest digest
equals the digest of a publish of the same tree without the cache (which captures and reads
everything). Each change below moves only ctime among the compared values (an xattr, a mode, an
inode flag, an owner), so a cache that compared anything less than ctime would publish the old line
and fail these tests.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.engine import blob_check
from artifactkit.engine.reference import scan
from artifactkit.metadata.flags import set_noatime_flag
from artifactkit.store import stat_cache, stat_cache_file
from tests.support.capability import require_real_root, require_tool
from tests.support.hostile_store import remove_blob
from tests.support.inode_clock import settle as _settle
from tests.support.opened_files import files_opened
from tests.support.stat_cache_file import Rows, body_of, rewrite_rows, row_of
from tests.support.stat_cache_tree import OLD, rich_tree
from tests.support.stores import stat_cache_path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """What a publish listed the xattrs of and read the target of, by source name; which files it read (opened)
    the kernel tells :func:`_same_as_uncached`, on either engine."""
    seen: dict[str, list[str]] = {"xattrs": [], "readlink": []}

    def counted(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            seen[kind].append(os.path.basename(os.fspath(path)))
            return real(path, *args, **kwargs)
        return call
    monkeypatch.setattr(scan, "read_xattrs", counted("xattrs", scan.read_xattrs))
    monkeypatch.setattr(os, "readlink", counted("readlink", os.readlink))
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)
    return seen


def _same_as_uncached(store: Store, src: Path, calls: dict[str, list[str]]) -> dict[str, list[str]]:
    """Publish cached, then uncached; the digests must be equal. What the cached one did is returned, the
    files it read (opened) by name."""
    for seen in calls.values():
        seen.clear()
    with files_opened(src) as opened:
        cached = store.publish(src, "demo", stat_cache=True)
        read = sorted(os.path.basename(path) for path in opened.take())
    did = {"read": read, **{kind: sorted(seen) for kind, seen in calls.items()}}
    uncached = store.publish(src, "demo")
    assert cached.digest == uncached.digest, "the cached publish wrote another manifest than a full capture"
    return did


def test_an_unchanged_tree_is_published_from_its_lines_without_capturing_or_reading_anything(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    did = _same_as_uncached(store, src, calls)
    # Only the two names of the hard link are captured in full (a line names the link's first name,
    # which the other entries decide), and their content comes from the inode's recorded read.
    assert did == {"read": [], "xattrs": ["h1", "h2"], "readlink": []}


def test_an_atime_a_read_moved_is_what_the_republished_line_says(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    before = os.lstat(src / "a.txt")
    (src / "a.txt").read_bytes()  # relatime/strictatime: an atime older than the mtime moves on a read
    after = os.lstat(src / "a.txt")
    assert after.st_atime_ns != before.st_atime_ns and after.st_ctime_ns == before.st_ctime_ns, \
        "premise: a read moves atime and leaves ctime (a noatime mount would not)"
    did = _same_as_uncached(store, src, calls)
    assert "a.txt" not in did["read"] + did["xattrs"]
    entry = {e.path: e for e in store.manifest("demo").entries}["a.txt"]
    assert entry.atime_ns == after.st_atime_ns


def _xattr_set(src: Path) -> None:
    os.setxattr(src / "a.txt", "user.origin", b"build 43")


def _xattr_removed(src: Path) -> None:
    os.removexattr(src / "a.txt", "user.origin")


def _dir_xattr_added(src: Path) -> None:
    os.setxattr(src / "sub" / "deep", "user.new", b"1")


def _chmod(src: Path) -> None:
    os.chmod(src / "sub" / "c.bin", 0o600)


def _noatime_flag(src: Path) -> None:
    set_noatime_flag(src / "sub" / "deep" / "d.txt", private_root=src)


def _link_retargeted(src: Path) -> None:
    (src / "link").unlink()
    (src / "link").symlink_to("sub/c.bin")
    # Every publish that captures a link reads its target, which moves a fresh link's atime once under
    # relatime (until it is past mtime and ctime): do that now, a tick after its ctime, so the cached
    # and the uncached publish see one atime.
    _settle(src)
    os.readlink(src / "link")


def _second_name_removed(src: Path) -> None:
    (src / "sub" / "h2").unlink()  # h1 is a plain file again: its line stops naming nothing


def _directory_renamed(src: Path) -> None:
    (src / "sub").rename(src / "moved")


@pytest.mark.parametrize(("change", "read"), [
    (_xattr_set, ["a.txt"]), (_xattr_removed, ["a.txt"]), (_dir_xattr_added, []), (_chmod, ["c.bin"]),
    (_noatime_flag, ["d.txt"]), (_link_retargeted, []), (_second_name_removed, ["h1"]), (_directory_renamed, []),
])
def test_every_change_that_moves_ctime_is_published_as_a_full_capture_would(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], change: Callable[[Path], None],
        read: list[str]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    change(src)
    _settle(src)
    did = _same_as_uncached(store, src, calls)
    # Only a file whose own ctime moved is hashed again; a renamed directory's files keep theirs and
    # take their digests from the cache by inode.
    assert did["read"] == read


def test_a_new_owner_is_published_as_a_full_capture_would(fast_tmp: Path, any_store: Store,
                                                          calls: dict[str, list[str]]) -> None:
    require_real_root("chown a source file to another uid")
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    os.chown(src / "a.txt", 4321, 4322)
    _settle(src)
    _same_as_uncached(store, src, calls)
    assert {e.path: e for e in store.manifest("demo").entries}["a.txt"].uid == 4321


def test_an_unchanged_tree_leaves_the_cache_file_and_a_changed_one_rewrites_it(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    # The first publish's readlink moved the link's atime (relatime: it was older than its mtime), and a row
    # holds the atime its line says: the second publish records the moved one, and then the tree is unchanged.
    store.publish(src, "demo", stat_cache=True)
    cache = stat_cache_path(store)
    first = os.lstat(cache)
    store.publish(src, "demo", stat_cache=True)
    assert (os.lstat(cache).st_ino, os.lstat(cache).st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    _chmod(src)
    store.publish(src, "demo", stat_cache=True)
    assert os.lstat(cache).st_ino != first.st_ino


@pytest.mark.parametrize("per_hit", [0, 10**9], ids=["stat-each-blob", "list-blobs"])
def test_both_ways_of_checking_cached_blobs_find_one_gc_removed(
        fast_tmp: Path, calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch, per_hit: int) -> None:
    monkeypatch.setattr(blob_check, "LIST_BLOBS_PER_LOOKUP", per_hit)
    src = rich_tree(fast_tmp / "src")
    store = Store(fast_tmp / "store")
    ref = store.publish(src, "demo", stat_cache=True)
    blob = {e.path: e.sha256 for e in store.manifest(ref).entries}["sub/c.bin"]
    assert blob is not None
    os.unlink(store.layout.blob_path(blob))
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["c.bin"]
    assert os.path.exists(store.layout.blob_path(blob))


def test_a_hit_whose_blob_gc_removed_is_captured_again_not_parsed_back_from_its_line(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    ref = store.publish(src, "demo", stat_cache=True)
    blob = {e.path: e.sha256 for e in store.manifest(ref).entries}["sub/c.bin"]
    assert blob is not None
    # A cache that proves itself but whose line for the file is not JSON: the line of a hit is only as
    # trusted as the cache, so a hit that must be read after all is captured from the source again.
    rewrite_rows(stat_cache_path(store), lambda rows: row_of(rows, "c.bin").__setitem__(3, "}garbage"))
    remove_blob(store, blob)
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["c.bin"] and "c.bin" in did["xattrs"]


@pytest.mark.parametrize("extents", ["[[Infinity, 1]]", "[[1e400, 1]]", "[[1.5, 4096]]", '[["0", "4096"]]',
                                     "[" * 5000 + "]" * 5000], ids=["infinity", "overflow", "float", "text", "deep"])
def test_a_content_hit_takes_only_extents_a_read_could_have_recorded(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], extents: str) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    rewrite_rows(stat_cache_path(store),
                 lambda rows: row_of(rows, "c.bin").__setitem__(3, f', "extents": {extents}}}'))
    _directory_renamed(src)  # its files miss by path and are looked up by inode
    _settle(src)
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["c.bin"]


def _fields_garbled(rows: Rows) -> None:
    row_of(rows, "a.txt")[1] = "x y z"


def _digest_escapes(rows: Rows) -> None:
    row_of(rows, "a.txt")[2] = "../../../etc/passwd"


@pytest.mark.parametrize("spoil", [_fields_garbled, _digest_escapes])
def test_a_malformed_row_in_a_valid_cache_is_a_miss_not_a_crash(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], spoil: Callable[[Rows], None]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    rewrite_rows(stat_cache_path(store), spoil)
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["a.txt"]


def test_a_valid_cache_whose_columns_do_not_line_up_is_ignored_whole(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]]) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    rewrite_rows(stat_cache_path(store), lambda rows: body_of(rows).replace(b"\t", b"", 1))
    did = _same_as_uncached(store, src, calls)
    assert sorted(did["read"]) == ["a.txt", "c.bin", "d.txt", "h1", "sparse"]  # every file, as uncached


def test_the_ctime_comparison_alone_catches_a_change_the_racy_rule_would_miss(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    # A window far below zero trusts every time (as if the clock had stepped back past the change):
    # only the recorded ctime still tells an xattr change from no change at all.
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", -(10**18))
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    _xattr_set(src)
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["a.txt"]


def test_on_whole_second_ext4_a_same_second_rewrite_is_caught_by_the_racy_window(
        ext4_whole_seconds: Path, fast_tmp: Path, any_store: Store) -> None:
    # ext4 with 128-byte inodes keeps whole seconds: a rewrite in the second the file was recorded in
    # leaves size, mtime (put back) and ctime as recorded. Only the racy window (2 s before the recording
    # publish started) keeps the cache from vouching for the old digest; the default window is kept here.
    src = Path(tempfile.mkdtemp(dir=ext4_whole_seconds)) / "src"  # a fresh one per backend on the session's mount
    src.mkdir()
    (src / "a.txt").write_bytes(b"alpha\n")
    (src / "b.txt").write_bytes(b"bravo\n")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    before = os.lstat(src / "a.txt")
    (src / "a.txt").write_bytes(b"ALPHA\n")
    os.utime(src / "a.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
    cached = store.publish(src, "demo", stat_cache=True)
    assert cached.digest == store.publish(src, "demo").digest
    assert {e.path: e.sha256 for e in store.manifest(cached).entries}["a.txt"] == \
        hashlib.sha256(b"ALPHA\n").hexdigest()


def test_a_cache_recorded_by_another_reader_is_not_used(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    src = rich_tree(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    real = stat_cache_file.reader_identity()
    monkeypatch.setattr(stat_cache_file, "reader_identity", lambda: [*real[:3], "0", real[4]])  # no capabilities
    did = _same_as_uncached(store, src, calls)
    assert did["read"] == ["a.txt", "c.bin", "d.txt", "h1", "sparse"]


_AS_READER = """
import sys
from artifactkit import Store
from artifactkit.store import stat_cache
stat_cache.RACY_WINDOW_NS = 0  # as the calls fixture does: hits must be possible for the test to mean anything
store = Store(sys.argv[1])
cached = store.publish(sys.argv[2], "demo", stat_cache=True)
print(cached.digest == store.publish(sys.argv[2], "demo").digest)
"""


@pytest.mark.parametrize("first", ["full-root", "without-sys-admin"])
def test_trusted_xattrs_seen_by_one_reader_are_not_reused_for_another(fast_tmp: Path, any_store: Store,
                                                                      first: str) -> None:
    # trusted.* xattrs are listed only with CAP_SYS_ADMIN: a line recorded by one reader would add them
    # to, or drop them from, the other's manifest if the cache did not know who recorded it.
    require_real_root("set trusted.* xattrs and drop CAP_SYS_ADMIN with setpriv")
    require_tool("setpriv", "util-linux")
    src = rich_tree(fast_tmp / "src")
    os.setxattr(src / "a.txt", "trusted.k", b"v")
    os.utime(src / "a.txt", ns=(OLD, OLD + 7))
    _settle(src)
    store = str(any_store.root)
    Store(store).publish(src, "demo")  # reads the link once: relatime moves its atime on that first read only
    limited = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
    runs = [[], limited] if first == "full-root" else [limited, []]
    for prefix in runs:
        done = subprocess.run([*prefix, sys.executable, "-c", _AS_READER, store, str(src)], capture_output=True,
                              text=True, check=True)
        assert done.stdout.split() == ["True"], done.stderr


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_hard_link_group_renamed_apart_is_published_as_a_full_capture_would(
        fast_tmp: Path, any_store: Store, calls: dict[str, list[str]], kind: str) -> None:
    # Renaming the directory that holds one name of an inode moves no ctime of the inode, yet it can change which
    # name is the first: a symlink's or a FIFO's line, reused, named a first name that had moved (a manifest
    # that no download accepts) or none (the link split). Such names are no hits, as a file's never were.
    src = fast_tmp / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    if kind == "symlink":
        os.symlink("t", src / "a" / "x")
    else:
        os.mkfifo(src / "a" / "x")
    os.link(src / "a" / "x", src / "b" / "y", follow_symlinks=False)
    _settle(src)  # every ctime older than the publish that records them: the cache trusts them all
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    os.rename(src / "b", src / "0")  # "0/y" sorts first now: it is the name the other must name
    _same_as_uncached(store, src, calls)
    entries = {e.path: e for e in store.manifest("demo").entries}
    assert (entries["0/y"].hardlink, entries["a/x"].hardlink) == (None, "0/y")

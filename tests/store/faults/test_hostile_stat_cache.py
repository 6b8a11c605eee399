"""A writer of the store cannot edit a victim's stat cache: it lives in the victim's own cache directory.

The cache says what the *source* looked like and what its files hashed to. It used to be ``ROOT/stat-cache.json``,
in the store: whoever could write the store rewrote it (recomputing its checksums), pointed a row at bytes of
their own planted as a blob, and the victim's next ``publish --stat-cache`` recorded those bytes under the
victim's version and digest, which ``verify`` called clean. Now the local store's cache is in the user's cache
directory as a bucket store's already was, and a directory there that is not the user's, or that others can
write, is refused by name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.store import stat_cache
from tests.support.hostile_store import put_blob
from tests.support.inode_clock import settle
from tests.support.opened_files import OpenedFiles
from tests.support.stat_cache_file import Rows, rewrite_rows, row_of
from tests.support.stores import stat_cache_path

VICTIM: bytes = b"the victim's own measurements, as published\n"
FOREIGN: bytes = b"an attacker's replacement, exactly as long!\n"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenedFiles]:
    """The source files a publish opened; the racy rule off (the tree was just written: trust it at once)."""
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)
    opened = OpenedFiles()
    yield opened
    opened.close()


def _source(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "measurements").write_bytes(VICTIM)
    (root / "README").write_bytes(b"how to read the measurements\n")
    return root


def test_a_stat_cache_rewritten_in_the_store_cannot_put_foreign_bytes_in_a_victims_version(
        fast_tmp: Path, reads: OpenedFiles) -> None:
    assert len(FOREIGN) == len(VICTIM)
    src = _source(fast_tmp / "src")
    settle(src)  # the cache trusts only files older than the publish that recorded them
    reads.watch(src)
    store = Store(fast_tmp / "store")
    store.publish(src, "demo", stat_cache=True)
    assert len(reads.take()) == 2
    # The attacker (a writer of the store): a blob of its own bytes, and the cache where the old code read it,
    # starting from the victim's own (the best forgery there is), the row pointed at that blob, its checksums
    # recomputed, and no version named (so the re-publish builds its manifest row by row).
    true_sha, foreign_sha = hashlib.sha256(VICTIM).hexdigest(), hashlib.sha256(FOREIGN).hexdigest()
    put_blob(store, foreign_sha, FOREIGN)
    planted = Path(store.root, "stat-cache.json")
    if stat_cache_path(store) != planted:
        shutil.copyfile(stat_cache_path(store), planted)

    def point_at_foreign_bytes(rows: Rows) -> None:
        row = row_of(rows, "measurements")
        assert row[2] == true_sha
        row[2], row[3] = foreign_sha, row[3].replace(true_sha, foreign_sha)

    rewrite_rows(planted, point_at_foreign_bytes, head_edits={"version": None})
    again = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == [], "the victim's own cache was not used: nothing shows the attack was ignored"
    assert again.digest == store.publish(src, "demo").digest  # what a full read records
    store.download(again, fast_tmp / "out")
    assert (fast_tmp / "out" / "data" / "measurements").read_bytes() == VICTIM
    assert store.verify().ok


def test_a_stat_cache_file_left_in_an_old_store_root_is_tolerated_and_never_read(
        fast_tmp: Path, reads: OpenedFiles) -> None:
    src = _source(fast_tmp / "src")
    store = Store(fast_tmp / "store")
    store.publish(src, "demo")
    Path(store.root, "stat-cache.json").write_bytes(b"{not even json\n")  # what an older version left
    reads.watch(src)
    store.publish(src, "demo", stat_cache=True)
    assert len(reads.take()) == 2
    report = store.verify()
    assert report.clean and "stat-cache" not in repr(report)  # not reported, as the layout tolerates it
    assert store.gc().removed_blobs == [] and store.gc().removed_staging == []
    assert Path(store.root, "stat-cache.json").read_bytes() == b"{not even json\n"


# The cache dir itself is the user's setting, links and all (as a store's root is); below it nothing is followed.
@pytest.mark.parametrize("case", [
    *((level, spoil) for level in ("cache-dir", "store-dir")
      for spoil in ("group-writable", "other-writable", "another-owner")),
    ("store-dir", "a-symlink")], ids="-".join)
def test_a_user_cache_dir_that_is_not_private_to_the_user_is_refused_by_name(
        fast_tmp: Path, any_store: Store, user_cache_dir: Path, reads: OpenedFiles, case: tuple[str, str]) -> None:
    from artifactkit.errors import UnsafeCacheError

    level, spoil = case
    if spoil == "another-owner":
        from tests.support.capability import require_real_root

        require_real_root("make a directory another user owns")
    src = _source(fast_tmp / "src")
    store = any_store
    store.publish(src, "demo", stat_cache=True)
    target = user_cache_dir if level == "cache-dir" else stat_cache_path(store).parent
    if spoil == "group-writable":
        os.chmod(target, 0o770)  # noqa: S103 - the unsafe mode under test
    elif spoil == "other-writable":
        os.chmod(target, 0o707)  # noqa: S103 - the unsafe mode under test
    elif spoil == "another-owner":
        os.chown(target, 65534, 65534)
    else:  # the directory replaced by a link to one of the same user's, made by whoever could rename it
        os.rename(target, user_cache_dir / "elsewhere")
        os.symlink(user_cache_dir / "elsewhere", target)
    versions = [str(ref) for ref in store.list()]
    with pytest.raises(UnsafeCacheError, match=f"^{target}") as refused:
        store.publish(src, "demo", stat_cache=True)
    assert refused.value.path == str(target) and [str(ref) for ref in store.list()] == versions
    reads.watch(src)
    store.publish(src, "demo")  # without the cache nothing asks for it
    assert len(reads.take()) == 2


def test_the_cli_refuses_an_unsafe_user_cache_dir_in_one_line_exit_2(
        fast_tmp: Path, user_cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from artifactkit.cli.common import EXIT_SETUP
    from artifactkit.cli.main import main

    src = _source(fast_tmp / "src")
    os.chmod(user_cache_dir, 0o777)  # noqa: S103 - the unsafe mode under test
    argv = ["publish", str(src), "--store", str(fast_tmp / "store"), "--name", "demo", "--stat-cache"]
    assert main(argv) == EXIT_SETUP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(user_cache_dir) in err and "writable" in err, err


def test_without_a_usable_user_cache_dir_the_stat_cache_is_only_lost(
        fast_tmp: Path, any_store: Store, reads: OpenedFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    (fast_tmp / "file").write_bytes(b"")
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(fast_tmp / "file" / "cache"))  # can never be made
    src = _source(fast_tmp / "src")
    reads.watch(src)
    for version in (1, 2):
        assert any_store.publish(src, "demo", stat_cache=True).version == version
        assert len(reads.take()) == 2  # every byte hashed, every time: nothing is trusted
    assert not Path(any_store.root, "stat-cache.json").exists()

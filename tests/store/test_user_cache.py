"""The user's cache directory: where it is, that it is made private, and that nothing in it is trusted unless only
this user could have written it (the stat caches and the key that proves a download's leftovers ours)."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from artifactkit.errors import UnsafeCacheError, UnsafePathError
from artifactkit.store import user_cache
from artifactkit.store.user_cache import KEY_BYTES, KEY_NAME, cache_base, opened, private_dir_key


def test_the_setting_then_xdg_then_home_decide_where_it_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(tmp_path / "set"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_base() == str(tmp_path / "set")
    monkeypatch.delenv("ARTIFACTKIT_CACHE_DIR")
    assert cache_base() == str(tmp_path / "xdg" / "artifactkit")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # the XDG spec: a relative path is invalid, ignored
    assert cache_base() == str(tmp_path / "home" / ".cache" / "artifactkit")


def test_without_an_absolute_home_there_is_no_cache_and_no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ARTIFACTKIT_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "not/absolute")
    monkeypatch.chdir(tmp_path)
    assert cache_base() is None and private_dir_key() is None
    with opened("local-stat-cache", "x") as fd:
        assert fd is None
    assert os.listdir(tmp_path) == []  # nothing made relative to the working directory


def test_what_is_missing_is_made_private_and_checked_level_by_level(
        user_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = user_cache_dir / "deeper" / "cache"
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(base))
    with opened("local-stat-cache", "abc", create=False) as fd:
        assert fd is None and not base.exists()
    with opened("local-stat-cache", "abc") as fd:
        assert fd is not None and os.path.samestat(os.fstat(fd), os.stat(base / "local-stat-cache" / "abc"))
    for level in (base, base / "local-stat-cache", base / "local-stat-cache" / "abc"):
        assert stat.S_IMODE(os.stat(level).st_mode) == 0o700


@pytest.mark.parametrize(("mode", "who"), [(0o770, "its group"), (0o707, "other users"),
                                           (0o777, "group and others")])
def test_a_directory_others_can_write_is_refused_naming_it(user_cache_dir: Path, mode: int, who: str) -> None:
    with opened("s3-stat-cache", "abc"):
        pass
    level = user_cache_dir / "s3-stat-cache"
    os.chmod(level, mode)
    with (pytest.raises(UnsafeCacheError, match=f"^{level} is writable by {who} \\(mode {mode:o}\\): ") as refused,
          opened("s3-stat-cache", "abc", create=False)):
        pass
    assert (refused.value.path, refused.value.why) == (str(level), f"is writable by {who} (mode {mode:o})")
    assert isinstance(refused.value, UnsafePathError)
    clone = pickle.loads(pickle.dumps(refused.value))
    assert type(clone) is UnsafeCacheError and clone.path == str(level) and str(clone) == str(refused.value)


def test_a_cache_dir_of_another_user_is_refused_and_gets_no_key(user_cache_dir: Path) -> None:
    from tests.support.capability import require_real_root

    require_real_root("make a directory another user owns")
    os.chown(user_cache_dir, 65534, 65534)
    with (pytest.raises(UnsafeCacheError, match=f"^{user_cache_dir} is owned by uid 65534, not by uid 0: "),
          opened()):
        pass
    assert private_dir_key() is None and os.listdir(user_cache_dir) == []  # no key made there for anyone


def test_a_file_where_the_cache_dir_should_be_is_refused(user_cache_dir: Path) -> None:
    os.rmdir(user_cache_dir)
    user_cache_dir.write_bytes(b"")
    with pytest.raises(UnsafeCacheError, match="is not a directory"), opened():
        pass


def test_the_key_is_made_once_private_and_whole_and_then_read(user_cache_dir: Path) -> None:
    key = private_dir_key()
    assert key is not None and len(key) == KEY_BYTES
    found = os.stat(user_cache_dir / KEY_NAME)
    assert stat.S_IMODE(found.st_mode) == 0o600 and found.st_uid == os.geteuid()
    assert (user_cache_dir / KEY_NAME).read_bytes() == key
    assert private_dir_key() == key and os.listdir(user_cache_dir) == [KEY_NAME]  # no temporary left
    user_cache._KEYS.clear()  # as another process finds it
    assert private_dir_key() == key


@pytest.mark.parametrize("spoil", ["readable-by-others", "a-symlink", "a-directory"])
def test_a_key_that_others_could_know_or_that_is_not_whole_is_not_used_nor_replaced(
        user_cache_dir: Path, spoil: str) -> None:
    # Written by hand, not by private_dir_key(): a key this process has read stays its key (user_cache._KEYS).
    key_path = user_cache_dir / KEY_NAME
    key_path.write_bytes(os.urandom(KEY_BYTES))
    key_path.chmod(0o600)
    if spoil == "readable-by-others":
        os.chmod(key_path, 0o644)
    elif spoil == "a-directory":
        key_path.unlink()
        key_path.mkdir(0o700)
    else:
        (user_cache_dir / "elsewhere").write_bytes(key_path.read_bytes())
        key_path.unlink()
        key_path.symlink_to(user_cache_dir / "elsewhere")
    before = os.lstat(key_path)
    assert private_dir_key() is None
    assert os.path.samestat(os.lstat(key_path), before)


@pytest.mark.parametrize("length", [0, KEY_BYTES - 1, KEY_BYTES + 1])
def test_a_key_torn_by_a_power_cut_is_replaced_by_a_whole_one(user_cache_dir: Path, length: int) -> None:
    # The key is not flushed (a first download does not wait for a disk): a crash can leave it empty or short.
    key_path = user_cache_dir / KEY_NAME
    key_path.write_bytes(b"x" * length)
    key_path.chmod(0o600)
    key = private_dir_key()
    assert key is not None and len(key) == KEY_BYTES and key_path.read_bytes() == key
    assert os.listdir(user_cache_dir) == [KEY_NAME]


def test_a_key_made_concurrently_is_the_one_both_use(user_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another process links its key in between our finding none and our link: ours is dropped, theirs read.
    theirs = b"k" * KEY_BYTES
    real_link = os.link

    def link_after_them(src: str, dst: str, **kwargs: int) -> None:
        fd = os.open(KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=kwargs["dst_dir_fd"])
        os.write(fd, theirs)
        os.close(fd)
        real_link(src, dst, **kwargs)
    monkeypatch.setattr(user_cache.os, "link", link_after_them)
    assert private_dir_key() == theirs
    assert os.listdir(user_cache_dir) == [KEY_NAME]

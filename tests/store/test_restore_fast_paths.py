"""The per-file fast paths of a download's restore take exactly the decisions of the full paths, and
hand every case they do not cover (a flag to change, an xattr listing that fails, a fake ioctl) to them."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from artifactkit.engine.reference import restore_meta
from artifactkit.errors import IsolationError, NotRestorableError
from artifactkit.metadata import flags
from artifactkit.metadata.model import FileMeta


def _entry(**fields: Any) -> FileMeta:
    return FileMeta(**{"path": "f", "kind": "file", "mode": 0o640, "mtime_ns": 1, "atime_ns": 1, "size": 0,
                       **fields})


def test_unchanged_flags_are_answered_in_one_ioctl_and_a_change_goes_the_full_way(fast_tmp: Path) -> None:
    path = fast_tmp / "f"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        now = flags.get_flags_int(fd)
        assert now is not None, "tmpfs reports inode flags on this kernel"
        assert flags.flags_if_unchanged(fd, now) == now
        nodump = int(flags.InodeFlag.FS_NODUMP_FL)
        assert flags.flags_if_unchanged(fd, now | nodump) is None  # a restorable bit to set: not this path's
        restore_meta.apply_fd(fd, _entry(flags=now | nodump), "f")  # the full path sets it and reads it back
        assert flags.get_flags_int(fd) == now | nodump
    finally:
        os.close(fd)


def test_a_fake_ioctl_is_not_taken_for_unchanged_flags(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fast_tmp / "f"
    path.write_bytes(b"x")
    monkeypatch.setattr(flags.fcntl, "ioctl", lambda *args: 0)  # what pyfakefs does
    fd = os.open(path, os.O_RDONLY)
    try:
        assert flags.flags_if_unchanged(fd, 0) is None
        with pytest.raises(IsolationError, match="fake"):
            restore_meta.apply_fd(fd, _entry(flags=0), "f")
    finally:
        os.close(fd)


def test_an_xattr_listing_that_fails_is_named_by_the_full_path(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fast_tmp / "f"
    path.write_bytes(b"x")

    def unsupported(*args: Any) -> list[str]:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(os, "listxattr", unsupported)
    fd = os.open(path, os.O_RDONLY)
    try:
        # Xattrs wanted where the filesystem has none (issue 49: with none wanted, it "holds none" and that is exact).
        with pytest.raises(NotRestorableError, match="cannot restore the xattrs of 'f' here: this filesystem does "
                                                     "not support xattrs"):
            restore_meta.apply_fd(fd, _entry(xattrs=(("user.a", b"1"),)), "f")
        restore_meta.apply_fd(fd, _entry(xattrs=()), "f")
    finally:
        os.close(fd)


def test_an_inherited_xattr_is_removed_though_none_was_wanted(fast_tmp: Path) -> None:
    path = fast_tmp / "f"
    path.write_bytes(b"x")
    os.setxattr(path, "user.inherited", b"1")  # as a default ACL would leave one on a new file
    fd = os.open(path, os.O_RDONLY)
    try:
        restore_meta.apply_fd(fd, _entry(xattrs=()), "f")
        assert os.listxattr(fd) == []
    finally:
        os.close(fd)

"""A private directory swapped, between its ``mkdir`` and its ``open``, for one of another owner is still refused
as a swap, and left alone: telling a filesystem that ignores ``mkdir``'s mode (s3fs, rclone mount: issue 49) from
tampering must not let a foreign directory through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from artifactkit.errors import NotRestorableError, UnsafeStoreError
from artifactkit.store import private_dir
from artifactkit.store.private_dir import PrivateDir
from tests.support.capability import require_real_root

NOBODY = 65534


@pytest.mark.parametrize("mode", [0o700, 0o755])
def test_a_directory_of_another_owner_swapped_in_after_the_mkdir_is_refused_and_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int) -> None:
    require_real_root("make a directory owned by another user")
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: str, mode_asked: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode_asked, dir_fd=dir_fd)
        os.rename(name, "stolen", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.chown(name, NOBODY, NOBODY, dir_fd=dir_fd)
        os.chmod(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(private_dir.os, "mkdir", mkdir_then_swap)
    with pytest.raises(UnsafeStoreError, match=f"was swapped: it is owned by uid {NOBODY}"):
        PrivateDir(str(tmp_path), ".dest.artifactkit-")
    monkeypatch.undo()
    foreign = [name for name in os.listdir(tmp_path) if name.startswith(".dest.artifactkit-")]
    assert len(foreign) == 1 and (tmp_path / "stolen").is_dir()
    st = os.lstat(tmp_path / foreign[0])
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, mode), "the foreign one is neither changed nor removed"


def _mkdir_as(mode: int) -> object:
    real_mkdir = os.mkdir

    def mkdir(name: str, mode_asked: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode_asked, dir_fd=dir_fd)
        os.chmod(name, mode, dir_fd=dir_fd)  # what s3fs (0750) and rclone mount (0755) make of mkdir(0700)

    return mkdir


def test_a_directory_whose_mkdir_mode_was_not_applied_is_made_private_by_chmod(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private_dir.os, "mkdir", _mkdir_as(0o750))
    made = PrivateDir(str(tmp_path), ".dest.artifactkit-")
    try:
        assert stat.S_IMODE(os.fstat(made.fd).st_mode) == 0o700
    finally:
        made.close()
    assert os.listdir(tmp_path) == []


def test_a_filesystem_that_applies_no_mode_is_named_and_its_directory_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private_dir.os, "mkdir", _mkdir_as(0o755))
    monkeypatch.setattr(private_dir.os, "fchmod", lambda fd, mode: None)  # rclone mount: chmod "succeeds"
    with pytest.raises(NotRestorableError, match=r"this filesystem \(\w+\) does not apply mode 0700 to the private "
                                                 r"directory .* \(it reads 755 after mkdir\)") as refused:
        PrivateDir(str(tmp_path), ".dest.artifactkit-")
    assert "swapped" not in str(refused.value)
    assert os.listdir(tmp_path) == []

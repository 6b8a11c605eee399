"""Inode flags on real filesystems, errno translation, and the guard around the only flag setter."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from artifactkit.errors import IsolationError, NotInPrivateTreeError
from artifactkit.metadata import flags
from artifactkit.metadata.flags import FS_NOATIME_FL, FlagResult, InodeFlag, get_flags, set_noatime_flag
from tests.support.mounts import Mounts


def test_flag_constants_match_the_kernel_header() -> None:
    assert InodeFlag.FS_NOATIME_FL == 0x80 == FS_NOATIME_FL
    assert (flags.FS_IOC_GETFLAGS, flags.FS_IOC_SETFLAGS) == (0x80086601, 0x40086602)


def test_setting_the_flag_on_a_private_tree_reads_back_and_is_inherited(tmpfs_strict: Path) -> None:
    tree = tmpfs_strict / "flags-inherit"
    tree.mkdir()
    assert not get_flags(tree).noatime
    result = set_noatime_flag(tree, private_root=tree)
    assert result.status == "ok" and result.noatime
    (tree / "dir").mkdir()
    (tree / "dir" / "file").write_bytes(b"x")
    assert get_flags(tree / "dir").noatime and get_flags(tree / "dir" / "file").noatime
    assert not set_noatime_flag(tree / "dir", private_root=tree, on=False).noatime


def test_ramfs_answers_unsupported(mounts: Mounts) -> None:
    ramfs = mounts.ramfs()
    (ramfs / "d").mkdir()
    assert get_flags(ramfs / "d") == FlagResult("unsupported", errno=errno.ENOTTY)
    assert set_noatime_flag(ramfs / "d", private_root=ramfs / "d").status == "unsupported"


@pytest.mark.parametrize(("code", "status"), [
    (errno.ENOTTY, "unsupported"), (errno.EOPNOTSUPP, "unsupported"), (errno.EINVAL, "unsupported"),
    (errno.EPERM, "forbidden"), (errno.EACCES, "forbidden"),
])
def test_ioctl_errnos_translate_to_a_status(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                            code: int, status: str) -> None:
    def failing(fd: int, request: int, value: int, where: str) -> int:
        raise OSError(code, os.strerror(code), where)

    monkeypatch.setattr(flags, "_ioctl_int", failing)
    assert get_flags(fast_tmp) == FlagResult(status, errno=code)  # type: ignore[arg-type]


def test_an_errno_that_is_not_about_flags_stays_an_oserror(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int, request: int, value: int, where: str) -> int:
        raise OSError(errno.EIO, "I/O error", where)

    monkeypatch.setattr(flags, "_ioctl_int", failing)
    with pytest.raises(OSError, match="I/O error") as info:
        get_flags(fast_tmp)
    assert info.value.errno == errno.EIO


def test_a_fake_ioctl_returning_zero_is_refused_not_believed(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyfakefs's ioctl is a no-op returning 0: believing it would make every check pass.
    monkeypatch.setattr(flags.fcntl, "ioctl", lambda fd, request, arg=0, mutate=True: 0)
    with pytest.raises(IsolationError, match=r"fake filesystem.*remedy"):
        get_flags(fast_tmp)


@pytest.fixture
def layout(tmpfs_strict: Path, request: pytest.FixtureRequest) -> dict[str, Path]:
    """parent/{tree, sibling, outside/file} with a link inside the tree leading out."""
    parent = tmpfs_strict / f"guard-{request.node.name.replace('[', '-').rstrip(']')}"
    (parent / "tree").mkdir(parents=True)
    (parent / "sibling").mkdir()
    (parent / "outside").mkdir()
    (parent / "outside" / "file").write_bytes(b"x")
    (parent / "tree" / "out").symlink_to("../outside")
    (parent / "tree" / "file-out").symlink_to("../outside/file")
    return {"parent": parent, "tree": parent / "tree", "sibling": parent / "sibling",
            "outside": parent / "outside", "via-link": parent / "tree" / "out",
            "file-via-link": parent / "tree" / "file-out", "dotdot": parent / "tree" / ".." / "sibling"}


@pytest.mark.parametrize("target", ["parent", "sibling", "via-link", "file-via-link", "dotdot"])
def test_a_flag_change_outside_the_private_tree_is_refused(layout: dict[str, Path], target: str) -> None:
    watched = [layout["parent"], layout["sibling"], layout["outside"], layout["outside"] / "file",
               *layout["parent"].parents]
    before = {path: get_flags(path) for path in watched}
    with pytest.raises(NotInPrivateTreeError, match="outside the private tree") as info:
        set_noatime_flag(layout[target], private_root=layout["tree"])
    assert info.value.private_root == str(layout["tree"])
    assert {path: get_flags(path) for path in watched} == before


def test_the_guard_resolves_a_symlinked_private_root_too(layout: dict[str, Path]) -> None:
    alias = layout["parent"] / "alias"
    alias.symlink_to("tree")
    assert set_noatime_flag(alias / ".", private_root=alias).noatime
    assert get_flags(layout["tree"]).noatime


def test_not_in_private_tree_error_pickles_with_its_context() -> None:
    err = NotInPrivateTreeError("refused", path="a", resolved="/b", private_root="/c")
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), str(copy), copy.resolved, copy.private_root) == (NotInPrivateTreeError, "refused", "/b", "/c")
    assert isinstance(copy, PermissionError)


EXTENTS_FL = 0x00080000  # ext4's internal "this inode maps its blocks with extents" bit


def test_restoring_a_flag_hands_ext4_its_internal_extents_bit_back_unchanged(ext4_relatime_dir: Path) -> None:
    # ~ of an IntFlag keeps only the named bits: computing the new word that way dropped EXTENTS, and
    # SETFLAGS then converted small files to block maps and refused files with several extents.
    sparse = ext4_relatime_dir / "two-extents"
    with sparse.open("wb") as handle:
        handle.write(b"a" * 4096)
        handle.seek(8 << 20)
        handle.write(b"b" * 4096)
    fd = os.open(sparse, os.O_RDONLY)
    try:
        before = flags.get_flags_fd(fd).flags
        assert before is not None and before & EXTENTS_FL
        result = flags.restore_flags_fd(fd, int(flags.InodeFlag.FS_NODUMP_FL), str(sparse))
        assert result.status == "ok" and result.flags is not None
        assert int(result.flags) == int(before) | flags.InodeFlag.FS_NODUMP_FL
        cleared = flags.restore_flags_fd(fd, 0, str(sparse))
        assert cleared.flags is not None and int(cleared.flags) == int(before)
    finally:
        os.close(fd)


def test_clearing_the_noatime_flag_keeps_ext4s_extents_bit(ext4_relatime_dir: Path) -> None:
    target = ext4_relatime_dir / "flagged"
    target.write_bytes(b"x" * 100)
    on = flags.set_noatime_flag(target, private_root=ext4_relatime_dir)
    off = flags.set_noatime_flag(target, private_root=ext4_relatime_dir, on=False)
    assert on.flags is not None and off.flags is not None
    assert int(off.flags) == int(on.flags) & ~int(flags.FS_NOATIME_FL) and int(off.flags) & EXTENTS_FL

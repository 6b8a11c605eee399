"""``remove_tree``: any depth, no recursion, few fds, no link followed, locked modes unlocked (issue 48: a tree
1,200 levels deep was a ``RecursionError`` out of ``shutil.rmtree``, and the private directory that held it stayed,
in the way of every later download to that name)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit._fsutil import remove_tree
from tests.support.capability import require_mounts, require_real_root

#: An unprivileged user for the locked-modes test when the suite runs as root (nobody).
NOBODY = 65534


def _chain(top: Path, depth: int, *, mode: int = 0o755) -> None:
    """``top/d/d/...``: ``depth`` directories below ``top``, made through one fd at a time (no path that long is
    needed), a file and a symlink to ``/`` in each; each of them gets ``mode`` once its contents are made."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth + 1):
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o400, dir_fd=fd))
            os.symlink("/", "up", dir_fd=fd)
            below = -1
            if level < depth:
                os.mkdir("d", dir_fd=fd)
                below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            if level:
                os.fchmod(fd, mode)
            os.close(fd)
            fd = below
    finally:
        if fd >= 0:
            os.close(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def few_fds() -> Iterator[None]:
    """At most 40 more fds than this process has open now, for the test's length."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_open_fds() + 40, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_chain_deeper_than_the_recursion_limit_and_path_max_is_removed_with_few_fds(
        fast_tmp: Path, few_fds: None) -> None:
    _chain(fast_tmp / "deep", 3000)  # 3,000 levels of "d/": 6,000 bytes, past PATH_MAX; past 1,000 frames
    before = _open_fds()
    remove_tree(fast_tmp / "deep")
    assert not (fast_tmp / "deep").exists() and _open_fds() == before


def test_a_deep_chain_is_removed_relative_to_a_dir_fd_and_nothing_beside_it_is_touched(fast_tmp: Path) -> None:
    _chain(fast_tmp / "deep", 200)
    (fast_tmp / "beside").write_bytes(b"kept")
    fd = os.open(fast_tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree("deep", dir_fd=fd)
    finally:
        os.close(fd)
    assert os.listdir(fast_tmp) == ["beside"]


def test_links_are_removed_not_followed(fast_tmp: Path) -> None:
    (fast_tmp / "outside").mkdir()
    (fast_tmp / "outside" / "kept").write_bytes(b"kept")
    _chain(fast_tmp / "tree", 3)
    os.symlink(fast_tmp / "outside", fast_tmp / "tree" / "link")
    remove_tree(fast_tmp / "tree")
    assert os.listdir(fast_tmp / "outside") == ["kept"]
    os.symlink(fast_tmp / "outside", fast_tmp / "link")
    with pytest.raises(OSError):  # a link as the tree itself: refused (as rmtree does), and nothing followed
        remove_tree(fast_tmp / "link")
    remove_tree(fast_tmp / "link", ignore_errors=True)
    assert os.listdir(fast_tmp / "outside") == ["kept"]


def test_an_absent_tree_is_fine(fast_tmp: Path) -> None:
    remove_tree(fast_tmp / "absent")


_AS_NOBODY = """
import os, sys
from artifactkit._fsutil import remove_tree
from tests.support.capability import require_mounts, require_real_root
os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
remove_tree(sys.argv[1])
"""


@pytest.mark.parametrize("mode", [0o000, 0o500, 0o300, 0o600], ids=oct)
def test_directories_whose_mode_locks_their_owner_out_are_removed_by_their_owner(fast_tmp: Path, mode: int) -> None:
    # 80 levels: past the fds held on the way down too, so the directories moved up are unlocked to be moved.
    tree = fast_tmp / "tree"
    _chain(tree, 80, mode=mode)
    if os.geteuid() != 0:
        remove_tree(tree)
    else:  # root needs no unlocking: the tree is given to an unprivileged user, who removes it
        require_real_root("remove a tree as an unprivileged owner")
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(fast_tmp)], check=True)
        done = subprocess.run([sys.executable, "-c", _AS_NOBODY, str(tree), str(NOBODY)], capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stderr
    assert not tree.exists()


def test_what_cannot_be_removed_is_left_with_ignore_errors_and_raised_without(fast_tmp: Path) -> None:
    require_mounts()
    tree = fast_tmp / "tree"
    _chain(tree, 40)
    (tree / "busy").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(tree / "busy")], check=True)
    try:  # a mount point stands for anything the kernel refuses to remove (EBUSY)
        with pytest.raises(OSError) as caught:
            remove_tree(tree)
        assert caught.value.errno == errno.EBUSY
        remove_tree(tree, ignore_errors=True)
        assert os.listdir(tree) == ["busy"]
    finally:
        subprocess.run(["umount", str(tree / "busy")], check=True)
    remove_tree(tree)
    assert not tree.exists()

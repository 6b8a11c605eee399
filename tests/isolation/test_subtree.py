"""Per-test subtrees of a session-verified tree: cheap, and still refused when they lose the flag."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit.errors import IsolationError
from artifactkit.isolation.probe import read_moves_atime
from artifactkit.isolation.tree import noatime_subtree, private_noatime_tree
from artifactkit.metadata.flags import get_flags, set_noatime_flag

OLD_NS = 1_000_000_000_123_456_789


def test_a_subtree_of_a_flagged_tree_inherits_the_flag_and_reads_leave_atime_alone(tmpfs_strict: Path) -> None:
    with private_noatime_tree(tmpfs_strict) as parent, noatime_subtree(parent) as sub:
        assert sub.mode == "flag" and get_flags(sub.path).noatime
        assert "inherited the flag" in sub.verified_how
        sample = sub.path / "out.bin"
        sample.write_bytes(b"x" * 100)
        assert not read_moves_atime(str(sample), OLD_NS)
    assert not sub.path.exists() and not parent.path.exists()


def test_a_subtree_made_after_the_flag_was_cleared_on_its_parent_is_refused(tmpfs_strict: Path) -> None:
    with private_noatime_tree(tmpfs_strict) as parent:
        set_noatime_flag(parent.path, private_root=parent.path, on=False)
        with pytest.raises(IsolationError, match="lacks FS_NOATIME_FL") as info:
            noatime_subtree(parent)
        assert info.value.failed == "inheritance" and "remedy" in str(info.value)
        assert os.listdir(parent.path) == [], "the refused subtree is removed"


def test_a_subtree_on_a_noatime_mount_needs_no_flag(mounts: object) -> None:
    from tests.support.mounts import Mounts

    assert isinstance(mounts, Mounts)
    base = mounts.tmpfs("noatime")
    with private_noatime_tree(base) as parent, noatime_subtree(parent) as sub:
        assert sub.mode == "noatime-mount" and not get_flags(sub.path).noatime

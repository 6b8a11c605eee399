"""Waiting on the clock the kernel stamps inode times with: a condition, never a duration."""

from __future__ import annotations

import os
from pathlib import Path

from artifactkit.store import stat_cache


def settle(root: Path) -> None:
    """Wait until the inode clock has passed every ctime under ``root`` (a tick, a few ms at most), so a
    later change cannot share a timestamp with anything already there."""
    newest = max(os.lstat(p).st_ctime_ns for p in [root, *root.rglob("*")])
    while stat_cache.inode_clock_ns() <= newest:
        os.sched_yield()

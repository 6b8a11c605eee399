"""Gate tests on capabilities found by probing, never on platform names.

A test that needs root and real mounts calls :func:`require_mounts`: on a laptop (not root) it
is an explicit environmental skip; with ``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI) that skip is a
failure instead, so the filesystem matrix can never silently stop running.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_ENV = "ARTIFACTKIT_REQUIRE_FS_MATRIX"


def matrix_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail when the environment requires the filesystem matrix."""
    if matrix_required():
        pytest.fail(f"{reason} — and {REQUIRE_ENV}=1 forbids skipping it", pytrace=False)
    pytest.skip(reason)


def require_mounts() -> None:
    """Root and the mount(8) tooling are the prerequisites for every real-filesystem test."""
    if os.geteuid() != 0:
        skip_or_fail("needs root to mount real test filesystems (tmpfs/ext4/ramfs/xfs/btrfs/overlay)")
    for tool in ("mount", "umount", "losetup", "mkfs.ext4"):
        if shutil.which(tool) is None:
            skip_or_fail(f"needs {tool} (util-linux / e2fsprogs) to create test filesystems")


def require_tool(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        skip_or_fail(f"needs {tool} from Debian's {package} (.ci/run installs it)")

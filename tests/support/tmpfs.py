"""A private scratch directory on a tmpfs, for tests where the filesystem is not the point (this VM's ext4 is
slow to create files), removed afterwards even when a test left it locked to its owner."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

SHM = Path("/dev/shm")


def tmpfs_available() -> bool:
    return SHM.is_dir() and os.access(SHM, os.W_OK)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory named ``prefix...`` on ``/dev/shm`` where it is writable, else in the default tmp dir."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=str(SHM) if tmpfs_available() else None))
    try:
        yield path
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(path)], check=False, capture_output=True)
        shutil.rmtree(path, ignore_errors=True)

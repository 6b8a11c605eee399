"""A download batch reads back every entry it made (``create.create_items``): the restore around it reads
back only the directories and hard links it made itself, so this read-back is the one that stands behind
every file's and link's own values."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.reference import create as download
from artifactkit.errors import MetadataMismatchError, TimestampNotRepresentable
from artifactkit.metadata.model import FileMeta

OLD = 1_000_000_000_123_456_789
DATA = b"content\n"


def _create(tmp: Path) -> list[None]:
    """One batch of one file, made under ``tmp/staging`` from ``tmp/blobs`` and read back."""
    staging, blobs = tmp / "staging", tmp / "blobs"
    (staging / "d").mkdir(parents=True)
    blobs.mkdir()
    sha = hashlib.sha256(DATA).hexdigest()
    (blobs / sha).write_bytes(DATA)
    entry = FileMeta(path="d/f", kind="file", mode=0o640, mtime_ns=OLD + 7, atime_ns=OLD, size=len(DATA), sha256=sha)
    root_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return download.create_items(root_fd, [("d", [entry])], BlobSource(str(blobs)))
    finally:
        os.close(root_fd)


def _drop_atime(real: Callable[..., Any]) -> Callable[..., Any]:
    def utime(target: Any, *args: Any, ns: tuple[int, int], **kwargs: Any) -> None:
        real(target, *args, ns=(ns[1], ns[1]), **kwargs)  # a copier that sets atime from mtime
    return utime


def _second_truncated(real: Callable[..., Any]) -> Callable[..., Any]:
    def utime(target: Any, *args: Any, ns: tuple[int, int], **kwargs: Any) -> None:
        real(target, *args, ns=(ns[0] // 10**9 * 10**9, ns[1]), **kwargs)
    return utime


def test_a_batch_makes_and_reads_back_its_entries(fast_tmp: Path) -> None:
    assert _create(fast_tmp) == []
    st = os.lstat(fast_tmp / "staging" / "d" / "f")
    assert (st.st_atime_ns, st.st_mtime_ns, st.st_mode & 0o7777) == (OLD, OLD + 7, 0o640)


@pytest.mark.parametrize("fault", [_drop_atime, _second_truncated])
def test_a_batch_whose_restore_loses_the_atime_is_refused_by_its_own_read_back(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, fault: Callable[[Callable[..., Any]], Any]) -> None:
    monkeypatch.setattr(os, "utime", fault(os.utime))
    # A truncated time is named as such (the filesystem "cannot hold" it); a dropped one is a mismatch.
    with pytest.raises((MetadataMismatchError, TimestampNotRepresentable), match="atime"):
        _create(fast_tmp)

"""A download batch reads back every entry it made, in whichever process runs it: the parent checks
only the entries it made itself, so this read-back is the one that stands behind a worker's files."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from artifactkit.errors import MetadataMismatchError, TimestampNotRepresentable
from artifactkit.metadata.model import FileMeta
from artifactkit.store import download

OLD = 1_000_000_000_123_456_789
DATA = b"content\n"


def _batch(tmp: Path) -> tuple[download.CreateShared, list[download.WireItem]]:
    staging, blobs = tmp / "staging", tmp / "blobs"
    (staging / "d").mkdir(parents=True)
    blobs.mkdir()
    sha = hashlib.sha256(DATA).hexdigest()
    (blobs / sha).write_bytes(DATA)
    entry = FileMeta(path="d/f", kind="file", mode=0o640, mtime_ns=OLD + 7, atime_ns=OLD, size=len(DATA), sha256=sha)
    st = os.stat(staging)
    return (str(staging), (st.st_dev, st.st_ino), str(blobs)), [("d", [download.to_wire(entry)])]


def _drop_atime(real: Callable[..., Any]) -> Callable[..., Any]:
    def utime(target: Any, *args: Any, ns: tuple[int, int], **kwargs: Any) -> None:
        real(target, *args, ns=(ns[1], ns[1]), **kwargs)  # a copier that sets atime from mtime
    return utime


def _second_truncated(real: Callable[..., Any]) -> Callable[..., Any]:
    def utime(target: Any, *args: Any, ns: tuple[int, int], **kwargs: Any) -> None:
        real(target, *args, ns=(ns[0] // 10**9 * 10**9, ns[1]), **kwargs)
    return utime


def test_a_batch_makes_and_reads_back_its_entries(fast_tmp: Path) -> None:
    shared, batch = _batch(fast_tmp)
    assert download.create_batch(shared, batch) == []
    st = os.lstat(fast_tmp / "staging" / "d" / "f")
    assert (st.st_atime_ns, st.st_mtime_ns, st.st_mode & 0o7777) == (OLD, OLD + 7, 0o640)


@pytest.mark.parametrize("fault", [_drop_atime, _second_truncated])
def test_a_batch_whose_restore_loses_the_atime_is_refused_by_its_own_read_back(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, fault: Callable[[Callable[..., Any]], Any]) -> None:
    shared, batch = _batch(fast_tmp)
    monkeypatch.setattr(os, "utime", fault(os.utime))
    # A truncated time is named as such (the filesystem "cannot hold" it); a dropped one is a mismatch.
    with pytest.raises((MetadataMismatchError, TimestampNotRepresentable), match="atime"):
        download.create_batch(shared, batch)

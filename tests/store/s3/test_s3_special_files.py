"""The bucket store restores FIFOs through the same restore as the local one (``restore_tree``, issue 27)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from artifactkit import Store, assert_metadata_equal, capture_tree

OLD = 1_000_000_000_123_456_789


def test_a_fifo_and_its_second_name_round_trip_through_a_bucket_exactly(s3_url: str, fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    os.mkfifo(src / "pipe", 0o640)
    os.link(src / "pipe", src / "pipe2")
    os.mknod(src / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))  # any user may (Linux >= 5.8)
    for offset, path in enumerate((src / "pipe", src / "whiteout", src)):
        os.utime(path, ns=(OLD + offset, OLD + offset + 7), follow_symlinks=False)
    expected = capture_tree(src)
    store = Store(s3_url)
    store.download(store.publish(src, "fifo"), fast_tmp / "out")
    assert_metadata_equal(expected, capture_tree(fast_tmp / "out"), stage="download")
    assert os.lstat(fast_tmp / "out" / "pipe").st_ino == os.lstat(fast_tmp / "out" / "pipe2").st_ino
    assert stat.S_ISFIFO(os.lstat(fast_tmp / "out" / "pipe").st_mode)

"""capture() uses lstat only and records integers; pure logic runs on a fake filesystem."""

from __future__ import annotations

import os
import stat

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from artifactkit import UnsupportedFileType, capture
from artifactkit.metadata.model import kind_of


def test_capture_records_ns_integers_and_a_relative_posix_path(fs: FakeFilesystem) -> None:
    fs.create_file("/tree/sub/a.txt", contents="abc", st_mode=stat.S_IFREG | 0o4755)
    os.utime("/tree/sub/a.txt", ns=(1_600_000_000_123_456_789, -1_000_000_001))
    meta = capture("/tree/sub/a.txt", root="/tree")
    assert meta.path == "sub/a.txt" and meta.kind == "file" and meta.size == 3 and meta.mode == 0o4755
    assert (meta.atime_ns, meta.mtime_ns) == (1_600_000_000_123_456_789, -1_000_000_001)
    assert isinstance(meta.atime_ns, int) and meta.sha256 is None  # nothing was read
    assert capture("/tree", root="/tree").path == "."


def test_capture_does_not_follow_a_symlink(fs: FakeFilesystem) -> None:
    fs.create_file("/tree/target")
    fs.create_symlink("/tree/link", "target")
    assert capture("/tree/link", root="/tree").kind == "symlink"


@pytest.mark.parametrize(("fmt", "words"), [(stat.S_IFIFO, "FIFO"), (stat.S_IFSOCK, "socket"),
                                            (stat.S_IFCHR, "character device"), (stat.S_IFBLK, "block device")])
def test_special_files_are_refused_with_what_they_are(fmt: int, words: str) -> None:
    with pytest.raises(UnsupportedFileType, match=words):
        kind_of(fmt | 0o644, "x")

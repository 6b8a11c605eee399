"""capture() uses lstat only and records integers; pure logic runs on a fake filesystem."""

from __future__ import annotations

import os
import stat

import attrs
import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from artifactkit import UnsupportedFileType, capture
from artifactkit.manifest.fields import FIELDS
from artifactkit.metadata.model import FIELD_ORDER, FileMeta, kind_of, meta_from_stat


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


def test_a_socket_is_refused_with_what_it_is() -> None:
    with pytest.raises(UnsupportedFileType, match="socket"):
        kind_of(stat.S_IFSOCK | 0o644, "x")


@pytest.mark.parametrize(("fmt", "kind"), [(stat.S_IFIFO, "fifo"), (stat.S_IFCHR, "char"), (stat.S_IFBLK, "block")])
def test_fifos_and_devices_are_kinds_of_their_own(fmt: int, kind: str) -> None:
    assert kind_of(fmt | 0o644, "x") == kind


def _every_field(meta: FileMeta) -> dict[str, object]:
    """All sixteen fields, ``ctime_ns`` and ``nlink`` too (they take no part in ``==``)."""
    return {name: getattr(meta, name) for name in FIELD_ORDER}


def test_the_field_order_the_positional_constructions_assume_is_the_classs() -> None:
    assert tuple(field.name for field in attrs.fields(FileMeta)) == FIELD_ORDER
    # FIELD_ORDER is read off the class: the manifest's field table, written out by hand, is what pins it.
    assert tuple(field.name for field in FIELDS) == FIELD_ORDER


def test_meta_from_stat_puts_every_value_in_its_own_field(fs: FakeFilesystem) -> None:
    fake = fs.create_file("/tree/a.txt", contents="abcd", st_mode=stat.S_IFREG | 0o640)
    os.utime("/tree/a.txt", ns=(1_600_000_000_000_000_001, 1_500_000_000_000_000_002))
    # Distinct, so a swap of the two shows; set after the utime, which only the owner may call (pyfakefs
    # checks it for a user who is not root).
    fake.st_uid, fake.st_gid = 1001, 1002
    st = os.lstat("/tree/a.txt")
    got = meta_from_stat("a.txt", st, sha256="s", target="t", owners=True, xattrs=(("user.k", b"v"),))
    assert _every_field(got) == _every_field(FileMeta(
        path="a.txt", kind="file", mode=0o640, mtime_ns=st.st_mtime_ns, atime_ns=st.st_atime_ns, size=4, sha256="s",
        target="t", ctime_ns=st.st_ctime_ns, uid=st.st_uid, gid=st.st_gid, xattrs=(("user.k", b"v"),),
        nlink=st.st_nlink))
    assert (got.mtime_ns, got.atime_ns) == (1_500_000_000_000_000_002, 1_600_000_000_000_000_001)
    assert (got.uid, got.gid) == (1001, 1002) and meta_from_stat("a.txt", st).uid is None

"""Issue 50 item 7: names a text tool mangles (a newline, bytes that are not UTF-8, a 255-byte component of
multibyte characters) and one file carrying every attribute at once, in the corpus and held to the checks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from artifactkit import assert_metadata_equal
from artifactkit.conformance import checks as conformance
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata import drift as dx
from artifactkit.metadata.flags import get_flags
from tests.support import faulty_copiers_round3 as faulty
from tests.support.capability import require_real_root


def test_byte_names_holds_a_newline_non_utf8_bytes_and_a_255_byte_multibyte_component(fast_tmp: Path) -> None:
    supplied = materialize("byte-names", fast_tmp / "tree")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "tree"), stage="materialize")  # before a listing
    names = os.listdir(os.fsencode(fast_tmp / "tree"))
    assert b"line\nbreak.txt" in names and b"latin1-caf\xe9.txt" in names
    assert b"invalid-\xff\xfe-\xc3" in names
    assert os.listdir(fast_tmp / "tree" / os.fsdecode(b"invalid-\xff\xfe-\xc3")) != []
    assert max(len(name) for name in names) == 255
    assert "名" * 85 in {meta.path for meta in supplied}


def test_a_copier_that_handles_names_as_text_fails_content_on_byte_names(tmpfs_strict: Path) -> None:
    report = conformance.check(faulty.names_as_text, corpus="byte-names", base=tmpfs_strict)
    content = {(f.path, f.diagnosis) for f in report.result("content").failures}
    assert ("line\nbreak.txt", dx.MISSING) in content
    assert (os.fsdecode(b"latin1-caf\xe9.txt"), dx.MISSING) in content
    assert ("latin1-caf\N{REPLACEMENT CHARACTER}.txt", dx.UNEXPECTED) in content


def test_the_store_keeps_every_byte_name(tmpfs_strict: Path) -> None:
    report = conformance.check("artifactkit", corpus="byte-names", base=tmpfs_strict)
    assert report.failed == frozenset()
    assert report.result("content").passed is True


def test_the_combination_file_carries_every_attribute_at_once(fast_tmp: Path) -> None:
    require_real_root("build the combination tree (foreign owners, trusted xattrs)")
    supplied = materialize("combination", fast_tmp / "tree")
    path = fast_tmp / "tree" / "all-at-once"
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o4750 and (st.st_uid, st.st_gid) == (1234, 5678) and st.st_nlink == 2
    assert {"user.origin", "trusted.audit", "system.posix_acl_access"} <= set(os.listxattr(path))
    assert st.st_blocks * 512 < st.st_size  # holes
    assert int(get_flags(path).flags or 0) & 0x40  # FS_NODUMP_FL: chattr +d
    assert (st.st_mtime_ns, st.st_atime_ns) == (-100_000_000_123_456_789, 4_102_444_800_987_654_321)
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "tree"), stage="materialize")


def test_the_combination_shows_each_attribute_a_copier_drops_and_the_store_keeps_all(tmpfs_strict: Path) -> None:
    require_real_root("build the combination tree (foreign owners, trusted xattrs)")
    plain = conformance.check(faulty.names_as_text, corpus="combination", base=tmpfs_strict)
    assert {"owner", "xattrs", "hardlinks", "sparse", "inode_flags"} <= plain.failed
    assert conformance.check("artifactkit", corpus="combination", base=tmpfs_strict).failed == frozenset()

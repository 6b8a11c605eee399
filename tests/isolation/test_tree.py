"""The verified private tree: real filesystems where possible, targeted fakes where none misbehaves."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from artifactkit.engine.reference.scan import scan_tree
from artifactkit.errors import IsolationError, MetadataMismatchError
from artifactkit.isolation import tree as isolation
from artifactkit.isolation.probe import probe_atime
from artifactkit.isolation.readers import competing_readers
from artifactkit.isolation.reading import read_file
from artifactkit.isolation.tree import check_tree_flagged, private_noatime_tree
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.metadata.flags import FS_NOATIME_FL, FlagResult, get_flags, set_noatime_flag
from artifactkit.metadata.model import FileMeta
from artifactkit.store.store import Store
from tests.support.capability import require_loop_devices, require_tool
from tests.support.mounts import Mounts

OLD_NS = 1_000_000_000_123_456_789          # 2001, every ns digit used
REMEDY = re.escape("remedy: run on a noatime test filesystem, or pass --artifactkit-base=PATH on one")


@pytest.fixture(scope="module")
def btrfs(mounts: Mounts) -> Path:
    """btrfs: supports FS_NOATIME_FL but passes it to no new inode (a real non-inheriting fs)."""
    require_loop_devices()
    require_tool("mkfs.btrfs", "btrfs-progs")
    image = mounts.image("btrfs", 128)
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True, capture_output=True)
    return mounts.mount("btrfs", mounts.loop(image), "btrfs")


@pytest.fixture
def strict_tree(tmpfs_strict: Path) -> Iterator[isolation.NoatimeTree]:
    with private_noatime_tree(tmpfs_strict) as tree:
        yield tree


def _ancestor_flags(path: Path) -> dict[Path, FlagResult]:
    return {parent: get_flags(parent) for parent in path.parents}


def test_strictatime_gets_the_flag_and_reads_stop_moving_atime(strict_tree: isolation.NoatimeTree) -> None:
    assert strict_tree.mode == "flag" and "control" in strict_tree.verified_how
    assert get_flags(strict_tree.path).noatime and os.listdir(strict_tree.path) == []
    out = strict_tree.path / "out" / "file"
    out.parent.mkdir()
    out.write_bytes(b"data")
    os.utime(out, ns=(OLD_NS, OLD_NS))
    read_file(str(out))
    assert os.lstat(out).st_atime_ns == OLD_NS
    check_tree_flagged(strict_tree.path)


def test_explicit_utime_still_works_inside_the_flagged_tree(strict_tree: isolation.NoatimeTree) -> None:
    path = strict_tree.path / "f"
    path.write_bytes(b"x")
    for value in (OLD_NS, OLD_NS + 1, -1_000_000_007):
        os.utime(path, ns=(value, value + 3))
        st = os.lstat(path)
        assert (st.st_atime_ns, st.st_mtime_ns) == (value, value + 3)


def test_no_ancestor_flag_changes_and_the_tree_is_removed_on_close(tmpfs_strict: Path) -> None:
    before = _ancestor_flags(tmpfs_strict / "x")
    with private_noatime_tree(tmpfs_strict) as tree:
        assert _ancestor_flags(tree.path) == {**before, **_ancestor_flags(tree.path)}
        container = tree.path.parent
        assert not get_flags(container).noatime
    assert not container.exists()
    assert _ancestor_flags(tmpfs_strict / "x") == before


def test_a_noatime_mount_needs_and_gets_no_flag(mounts: Mounts) -> None:
    with private_noatime_tree(mounts.tmpfs("noatime")) as tree:
        assert tree.mode == "noatime-mount"
        assert not get_flags(tree.path).noatime


def test_ramfs_is_refused_naming_the_filesystem_and_the_remedy(mounts: Mounts) -> None:
    ramfs = mounts.ramfs()
    with pytest.raises(IsolationError, match=f"ramfs.*unsupported.*{REMEDY}") as info:
        private_noatime_tree(ramfs)
    assert (info.value.fs_type, info.value.failed) == ("ramfs", "unsupported")
    assert os.listdir(ramfs) == []  # nothing left behind after a refusal


def test_btrfs_does_not_inherit_the_flag_and_is_refused(btrfs: Path) -> None:
    probe = probe_atime(btrfs)
    assert (probe.noatime_flag, probe.flag_inherited) == ("supported", False)
    with pytest.raises(IsolationError, match=f"btrfs.*not inherited.*{REMEDY}") as info:
        private_noatime_tree(btrfs, probe=attrs.evolve(probe, flag_inherited=True))  # the tree's own check
    assert info.value.failed == "inheritance"


def test_non_inheritance_is_caught_by_the_tree_check_on_tmpfs_too(tmpfs_strict: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    real_new_file = isolation._new_file

    def btrfs_like(path: str) -> None:  # creates for real, then drops the flag as btrfs would
        real_new_file(path)
        set_noatime_flag(path, private_root=os.path.dirname(path), on=False)

    monkeypatch.setattr(isolation, "_new_file", btrfs_like)
    with pytest.raises(IsolationError, match="not inherited") as info:
        private_noatime_tree(tmpfs_strict)
    assert info.value.failed == "inheritance"


def test_a_flag_reported_set_that_does_not_stop_reads_is_refused(tmpfs_strict: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # No real filesystem lies like this: fake only the flag answers, keep the reads real.
    says_set = FlagResult("ok", flags=FS_NOATIME_FL)
    monkeypatch.setattr(isolation, "set_noatime_flag", lambda path, *, private_root, on=True: says_set)
    monkeypatch.setattr(isolation, "get_flags", lambda path: says_set)
    with pytest.raises(IsolationError, match=f"still moved a flagged file's atime.*{REMEDY}") as info:
        private_noatime_tree(tmpfs_strict)
    assert info.value.failed == "effectiveness"


def test_an_effectiveness_check_without_a_moving_control_is_refused(tmpfs_strict: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "read_moves_atime", lambda path, atime_ns: False)
    with pytest.raises(IsolationError, match=r"control.*proved nothing") as info:
        private_noatime_tree(tmpfs_strict)
    assert info.value.failed == "positive-control"


def test_a_fake_filesystem_is_refused_instead_of_passing_vacuously(fs: object) -> None:
    with pytest.raises(IsolationError, match=r"fake.*pyfakefs"):
        private_noatime_tree("/tmp")


def test_a_file_renamed_into_the_tree_keeps_no_flag_and_is_named(strict_tree: isolation.NoatimeTree) -> None:
    outside = strict_tree.path.parent / "made-elsewhere"
    outside.write_bytes(b"x")
    (strict_tree.path / "inside").write_bytes(b"y")
    os.rename(outside, strict_tree.path / "moved-in")
    (strict_tree.path / "link").symlink_to("inside")
    with pytest.raises(IsolationError, match=r"1 inode\(s\).*moved-in") as info:
        check_tree_flagged(strict_tree.path)
    assert info.value.missing == ["moved-in"]


# -- regressions through the store ------------------------------------------------------------


def _historical_tree(src: Path) -> dict[str, FileMeta]:
    """Write a small tree and give every entry distinct historical times; return what was supplied."""
    (src / "sub").mkdir(parents=True)
    for rel, body in (("a.txt", b"alpha"), ("sub/b.bin", b"\x00\x01" * 300), ("sub/c", b"")):
        (src / rel).write_bytes(body)
    (src / "link").symlink_to("a.txt")
    supplied: dict[str, tuple[int, int]] = {}
    entries = ["a.txt", "sub/b.bin", "sub/c", "link", "sub", "."]  # children before their directory
    for i, rel in enumerate(entries):
        times = (OLD_NS + i * 1_111_111_111, OLD_NS - i * 777_777_777)
        os.utime(src / rel, ns=times, follow_symlinks=False)
        supplied[rel] = times
    return {m.path: attrs.evolve(m, atime_ns=supplied[m.path][0], mtime_ns=supplied[m.path][1])
            for m in scan_tree(src).entries}


def test_exact_historical_atime_survives_competing_readers_at_publish_and_download(
        strict_tree: isolation.NoatimeTree) -> None:
    src, dest = strict_tree.path / "src", strict_tree.path / "dest"
    expected = _historical_tree(src)
    store = Store(strict_tree.path / "store")
    with competing_readers(strict_tree.path, n=4) as readers:
        readers.wait_reads(200)
        ref = store.publish(src, "art")
        assert_metadata_equal(expected, store.manifest(ref).entries, stage="publish")
        store.download(ref, dest)
        readers.wait_reads(readers.reads + 300)
        assert_metadata_equal(expected, scan_tree(dest).entries, stage="download")
    assert readers.reads >= 500


def test_without_isolation_the_same_readers_break_both_stages(tmpfs_strict: Path, fast_tmp: Path) -> None:
    # The guard removed: an unflagged directory on the same strictatime mount.
    plain = tmpfs_strict / "unprotected"
    src = plain / "src"
    expected = _historical_tree(src)
    store = Store(fast_tmp / "store")
    with competing_readers(src, n=2) as readers:
        readers.wait_reads(200)
        ref = store.publish(src, "art")
    with pytest.raises(MetadataMismatchError, match="advanced-by-read"):
        assert_metadata_equal(expected, store.manifest(ref).entries, stage="publish")
    recorded = store.manifest(ref).entries
    store.download(ref, plain / "dest")
    with competing_readers(plain / "dest", n=2) as readers:
        readers.wait_reads(200)
    with pytest.raises(MetadataMismatchError, match=r"stage 'download'.*advanced-by-read"):
        assert_metadata_equal(recorded, scan_tree(plain / "dest").entries, stage="download")


def _copy_with_bad_atime(src: Path, dst: Path, how: str) -> None:
    """A faulty copier: content, mode and mtime right; atime omitted or truncated to seconds."""
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copyfile)
    for dirpath, dirs, files in os.walk(dst, topdown=False):
        for name in [*files, *dirs, None]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(os.path.join(src, os.path.relpath(path, dst)))
            if not os.path.islink(path):
                os.chmod(path, st.st_mode & 0o7777)
            atime = os.lstat(path).st_atime_ns if how == "omitted" else st.st_atime_ns // 10**9 * 10**9
            os.utime(path, ns=(atime, st.st_mtime_ns), follow_symlinks=False)


@pytest.mark.parametrize("how", ["omitted", "second-truncated"])
def test_a_bad_atime_in_copied_outputs_is_caught_at_publish_and_download(
        strict_tree: isolation.NoatimeTree, how: str) -> None:
    src, copy = strict_tree.path / "src", strict_tree.path / "copy"
    expected = _historical_tree(src)
    _copy_with_bad_atime(src, copy, how)
    store = Store(strict_tree.path / "store")
    ref = store.publish(copy, "copied")
    for stage, actual in (("publish", lambda: store.manifest(ref).entries),
                          ("download", lambda: (store.download(ref, strict_tree.path / "dest"),
                                                scan_tree(strict_tree.path / "dest").entries)[1])):
        with pytest.raises(MetadataMismatchError, match=f"stage '{stage}'") as info:
            assert_metadata_equal(expected, actual(), stage=stage)
        found = {(m.path, m.field, m.diagnosis) for m in info.value.mismatches}
        assert ("a.txt", "atime_ns", how) in found
        assert {field for _, field, _ in found} == {"atime_ns"}


def test_a_tree_where_explicit_utime_stops_working_is_refused(tmpfs_strict: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # No real filesystem does this with the flag set: fake an ignored utime on the tree's check file.
    real_utime = os.utime

    def ignoring_utime(path: object, *args: object, **kwargs: object) -> None:
        if not str(path).endswith(".artifactkit-file"):
            real_utime(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "utime", ignoring_utime)
    with pytest.raises(IsolationError, match=r"explicit utime\(ns=") as info:
        private_noatime_tree(tmpfs_strict)
    assert info.value.failed == "explicit-utime"

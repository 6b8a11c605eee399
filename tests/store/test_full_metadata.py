"""Everything ``cp -a`` keeps, and more, through the store — one test per row of the issue's table,
each on a strictatime tmpfs and on a loop ext4. The security regressions are named as such."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import ArtifactkitError, Store, assert_metadata_equal, capture_tree
from artifactkit.errors import NotRestorableError, ReownedWarning
from artifactkit.metadata.flags import InodeFlag, get_flags
from artifactkit.metadata.model import FileMeta
from artifactkit.metadata.render import acl_text
from tests.support.capability import (
    require_acls_naming_other_ids,
    require_loop_devices,
    require_real_root,
    require_tool,
)
from tests.support.mounts import Mounts

OLD = 1_000_000_000_123_456_789
GIB = 1 << 30


@pytest.fixture(params=["tmpfs", "ext4"])
def fs(request: pytest.FixtureRequest, mounts: Mounts) -> Iterator[Path]:
    """A fresh directory on each filesystem the rows are checked on, both mounted ``noatime``: these
    rows are about owners, xattrs, links, holes and flags, and ``readlink`` of a source symlink would
    otherwise move its atime between the capture and the publish (only the inode flag prevents that)."""
    if request.param == "ext4":
        require_loop_devices()
        base = mounts.shared("ext4-noatime-full", lambda m: m.ext4("noatime", size_mb=128))
    else:
        base = mounts.shared("tmpfs-noatime-full", lambda m: m.tmpfs("noatime", size="2g"))
    work = Path(tempfile.mkdtemp(dir=base))
    yield work


def _times(*paths: Path) -> None:
    for path in paths:
        os.utime(path, ns=(OLD, OLD + 7), follow_symlinks=False)


@pytest.fixture
def local_store_dir(fs: Path) -> Path:
    """The local case's store sits on the filesystem under test, as ``work/store``."""
    return fs


def round_trip(work: Path, store: Store, **download: str) -> tuple[list[FileMeta], Path]:
    """Publish ``work/src`` into ``store``, download it to ``work/out``; return the source capture and ``out``."""
    src = work / "src"
    expected = capture_tree(src)
    store.download(store.publish(src, "demo"), work / "out", **download)  # type: ignore[arg-type]
    return expected, work / "out"


def test_owners_of_files_dirs_and_an_lchowned_symlink_round_trip_exactly(fs: Path, any_store: Store) -> None:
    require_real_root("give entries foreign owners")
    src = fs / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"x")
    os.symlink("f", src / "d" / "l")
    for path in (src / "d", src / "d" / "f"):
        os.chown(path, 1234, 5678)
    os.lchown(src / "d" / "l", 4321, 8765)
    _times(src / "d" / "f", src / "d" / "l", src / "d", src)
    expected, out = round_trip(fs, any_store)
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    assert os.lstat(out / "d" / "l").st_uid == 4321 and os.stat(out / "d" / "f").st_gid == 5678


def test_security_a_setuid_file_of_a_foreign_owner_never_becomes_setuid_root(fs: Path, any_store: Store) -> None:
    require_real_root("make a file owned by uid 1234")
    src = fs / "src"
    src.mkdir()
    tool = src / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    os.chown(tool, 1234, 1234)
    os.chmod(tool, 0o4755)  # noqa: S103 - the setuid file under test
    _, out = round_trip(fs, any_store)
    st = os.stat(out / "tool")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1234, 0o4755), "setuid stays with its owner, not root"


def test_user_trusted_xattrs_and_a_file_capability_round_trip(fs: Path, any_store: Store) -> None:
    require_real_root("set trusted.* xattrs and file capabilities")
    require_tool("setcap", "libcap2-bin")
    src = fs / "src"
    src.mkdir()
    (src / "bin").write_bytes(b"\x7fELF")
    os.setxattr(src / "bin", "user.origin", b"build 42")
    os.setxattr(src / "bin", "trusted.note", b"\x00\x01binary")
    subprocess.run(["setcap", "cap_net_raw+ep", str(src / "bin")], check=True)
    _times(src / "bin", src)
    expected, out = round_trip(fs, any_store)
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    assert os.getxattr(out / "bin", "trusted.note") == b"\x00\x01binary"
    assert subprocess.run(["getcap", str(out / "bin")], capture_output=True, text=True, check=True
                          ).stdout.split()[-1] == "cap_net_raw=ep"


def test_security_an_access_acl_is_kept_and_the_group_never_gains_write(fs: Path, any_store: Store) -> None:
    require_tool("setfacl", "acl")
    require_acls_naming_other_ids()
    src = fs / "src"
    src.mkdir()
    key = src / "key"
    key.write_bytes(b"secret")
    os.chmod(key, 0o640)
    subprocess.run(["setfacl", "-m", f"u:{os.getuid() + 1234}:rw", str(key)], check=True)
    _times(key, src)
    expected, out = round_trip(fs, any_store)
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    acl = acl_text(os.getxattr(out / "key", "system.posix_acl_access"))
    assert acl is not None and f"u:{os.getuid() + 1234}:rw-" in acl and "g::r--" in acl
    assert stat.S_IMODE(os.stat(out / "key").st_mode) & 0o070 == 0o060, "the mask is rw-, the group class"


def test_security_a_default_acl_of_the_destination_is_not_added_to_downloaded_entries(
        fs: Path, any_store: Store) -> None:
    require_tool("setfacl", "acl")
    require_acls_naming_other_ids()
    src = fs / "src"
    (src / "priv").mkdir(parents=True)
    (src / "priv" / "key").write_bytes(b"secret")
    os.chmod(src / "priv" / "key", 0o600)
    _times(src / "priv" / "key", src / "priv", src)
    parent = fs / "shared"
    parent.mkdir()
    subprocess.run(["setfacl", "-d", "-m", "u:54321:rwx", str(parent)], check=True)
    expected = capture_tree(src)
    store = any_store
    store.download(store.publish(src, "demo"), parent / "out")
    after = capture_tree(parent / "out")
    assert_metadata_equal(expected, after, stage="download")
    assert not any(name.startswith("system.posix_acl") for name in os.listxattr(parent / "out" / "priv" / "key"))


def test_a_hard_link_group_of_three_names_is_one_inode_after_download(fs: Path, any_store: Store) -> None:
    src = fs / "src"
    (src / "a").mkdir(parents=True)
    (src / "z").write_bytes(b"shared")
    os.link(src / "z", src / "a" / "two")
    os.link(src / "z", src / "three")
    _times(src / "z", src / "a", src)
    expected, out = round_trip(fs, any_store)
    assert {m.path: m.hardlink for m in expected if m.kind == "file"} == {"a/two": None, "three": "a/two",
                                                                         "z": "a/two"}
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    inodes = {os.stat(out / name).st_ino for name in ("z", "a/two", "three")}
    assert len(inodes) == 1 and os.stat(out / "z").st_nlink == 3


def test_a_sparse_gigabyte_with_4_kib_of_data_stays_sparse_in_the_store_and_the_destination(fs: Path) -> None:
    # Local only: it reads the blob's blocks on disk (and a bucket would be sent the whole gigabyte).
    src = fs / "src"
    src.mkdir()
    big = src / "big"
    with big.open("wb") as handle:
        handle.truncate(GIB)
        handle.seek(GIB // 2)
        handle.write(b"d" * 4096)
    _times(big, src)
    expected, out = round_trip(fs, Store(fs / "store"))
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    entry = next(m for m in expected if m.path == "big")
    assert entry.extents == ((GIB // 2, 4096),)
    blob = fs / "store" / "blobs" / str(entry.sha256)
    for path in (blob, out / "big"):
        assert os.stat(path).st_blocks * 512 <= 64 << 10, f"{path} was filled"
    digest = subprocess.run(["sha256sum", str(blob)], capture_output=True, text=True, check=True).stdout.split()[0]
    assert digest == entry.sha256


def test_restorable_inode_flags_round_trip_and_immutable_is_refused_not_dropped(fs: Path, any_store: Store) -> None:
    require_real_root("set inode flags")
    require_tool("chattr", "e2fsprogs")
    src = fs / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    subprocess.run(["chattr", "+d", str(src / "f")], check=True)
    _times(src / "f", src)
    expected, out = round_trip(fs, any_store)
    assert_metadata_equal(expected, capture_tree(out), stage="download")
    flags = get_flags(out / "f").flags
    assert flags is not None and flags & InodeFlag.FS_NODUMP_FL
    (src / "g").write_bytes(b"y")
    subprocess.run(["chattr", "+i", str(src / "g")], check=True)
    try:
        store = any_store
        with pytest.raises(NotRestorableError, match=r"g: inode flag\(s\) i"):
            store.download(store.publish(src, "demo"), fs / "out2")
        assert not (fs / "out2").exists()
    finally:
        subprocess.run(["chattr", "-i", str(src / "g")], check=True)


def test_flags_beyond_the_restorable_and_compared_ones_are_recorded_and_not_restored(ext4_relatime_dir: Path) -> None:
    # A limit the README and store.md state: chattr's T (topdir) and s (secure deletion), which ext4 stores, are
    # in the manifest as read, and a download neither sets nor compares them (cp -a keeps none either).
    require_real_root("set inode flags")
    require_tool("chattr", "e2fsprogs")
    src = ext4_relatime_dir / "src"
    (src / "top").mkdir(parents=True)
    (src / "f").write_bytes(b"x")
    subprocess.run(["chattr", "+T", str(src / "top")], check=True)
    subprocess.run(["chattr", "+s", str(src / "f")], check=True)
    store = Store(ext4_relatime_dir / "store")
    ref = store.publish(src, "demo")
    recorded = {e.path: e.flags for e in store.manifest(ref).entries}
    assert recorded["top"] is not None and recorded["top"] & 0x20000  # FS_TOPDIR_FL
    assert recorded["f"] is not None and recorded["f"] & 0x1  # FS_SECRM_FL
    store.download(ref, ext4_relatime_dir / "out")
    for name, bit in (("top", 0x20000), ("f", 0x1)):
        got = get_flags(ext4_relatime_dir / "out" / name).flags
        assert got is not None and not got & bit, name


def test_a_foreign_owner_is_refused_for_a_normal_user_and_re_owned_without_setuid_when_asked() -> None:
    require_real_root("make a store with foreign owners and then download it as another user")
    # The other user must reach the store: a world-traversable directory of its own (the mounts'
    # base is private to root), on the host filesystem, which is not what this row is about.
    work = Path(tempfile.mkdtemp(prefix="artifactkit-reown-", dir="/tmp"))
    try:
        os.chmod(work, 0o777)  # noqa: S103 - a private test dir the other user must create its downloads in
        src = work / "src"
        src.mkdir()
        (src / "tool").write_bytes(b"x")
        os.chown(src / "tool", 1234, 1234)
        os.chmod(src / "tool", 0o6755)  # noqa: S103 - the setuid/setgid file under test
        _times(src / "tool", src)
        Store(work / "store").publish(src, "demo")
        script = ("import sys, warnings\nfrom artifactkit import Store\n"
                  "s = Store(sys.argv[1])\n"
                  "try:\n    s.download('demo', sys.argv[2])\nexcept Exception as e:\n    print(type(e).__name__)\n"
                  "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
                  "    s.download('demo', sys.argv[3], owners='current')\n    print(w[0].category.__name__)\n")
        done = subprocess.run(["setpriv", "--reuid=1235", "--regid=1235", "--clear-groups", sys.executable, "-c",
                               script, str(work / "store"), str(work / "refused"), str(work / "reowned")],
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert done.stdout.split() == ["NotRestorableError", "ReownedWarning"], done.stderr
        assert not (work / "refused").exists()
        st = os.stat(work / "reowned" / "tool")
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1235, 0o755), "no setuid/setgid bit on a re-owned file"
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_a_lossy_copy_is_named_by_uid_xattr_and_hardlink(fs: Path) -> None:
    require_real_root("give entries foreign owners")
    src = fs / "src"
    src.mkdir()
    (src / "a").write_bytes(b"x")
    os.link(src / "a", src / "b")
    os.chown(src / "a", 1234, 1234)
    os.setxattr(src / "a", "user.k", b"v")
    subprocess.run(["cp", "-r", "--preserve=mode,timestamps", str(src), str(fs / "copy")], check=True)
    with pytest.raises(AssertionError) as caught:
        assert_metadata_equal(capture_tree(src), capture_tree(fs / "copy"), stage="cp -r")
    message = str(caught.value)
    assert "uid: expected 1234" in message and "xattr-missing" in message and "hardlink-split" in message


def test_the_reowned_warning_is_a_warning_and_every_new_error_is_an_artifactkit_error() -> None:
    assert issubclass(ReownedWarning, UserWarning) and issubclass(NotRestorableError, ArtifactkitError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ReownedWarning):
            warnings.warn(ReownedWarning("x"), stacklevel=1)

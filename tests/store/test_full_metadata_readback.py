"""Issue 12's acceptance, read back independently of the kit's own capture: a round trip of the
xattrs, hard-links, sparse and owners trees as root into a parent with a default ACL, every field
of every entry checked with plain ``os.lstat``, ``os.listxattr``/``os.getxattr(follow_symlinks=False)``
and the flags ioctl; and ``conformance`` holding ``cp -a`` and a lossy ``cp -r`` to the new checks."""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from artifactkit import Store, conformance, materialize
from artifactkit.metadata.model import FileMeta
from tests.support.capability import require_real_root, require_tool

TREES = ("xattrs", "hardlinks", "sparse", "owners")
FS_IOC_GETFLAGS = 0x80086601
COMPARED_FLAGS = 0x8 | 0x10 | 0x20 | 0x40 | 0x10000  # S i a d D, as chattr letters


def _flags(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return int(struct.unpack("=i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("=i", 0)))[0])
    finally:
        os.close(fd)


def _independent(root: Path, entry: FileMeta) -> dict[str, object]:
    path = str(root / entry.path)
    st = os.lstat(path)
    names = sorted(os.listxattr(path, follow_symlinks=False))
    return {
        "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
        "mtime_ns": st.st_mtime_ns, "atime_ns": st.st_atime_ns,
        "xattrs": {name: os.getxattr(path, name, follow_symlinks=False) for name in names},
        "flags": None if stat.S_ISLNK(st.st_mode) else _flags(path) & COMPARED_FLAGS,
        "blocks": st.st_blocks if stat.S_ISREG(st.st_mode) else None, "ino": st.st_ino,
    }


@pytest.mark.parametrize("tree", TREES)
def test_a_root_round_trip_into_a_parent_with_a_default_acl_reads_back_equal_field_by_field(
        tree: str, tmpfs_strict: Path) -> None:
    require_real_root("build the owners tree and restore every namespace")
    require_tool("setfacl", "acl")
    work = tmpfs_strict / f"readback-{tree}"
    work.mkdir()
    supplied = materialize(tree, work / "src")
    parent = work / "shared"
    parent.mkdir()
    subprocess.run(["setfacl", "-d", "-m", "u:54321:rwx,g:54321:r-x", str(parent)], check=True)
    store = Store(work / "store")
    store.download(store.publish(work / "src", tree), parent / "out")
    for entry in supplied:
        source, copy = _independent(work / "src", entry), _independent(parent / "out", entry)
        # Times are the supplied ones (the source's may have moved by being read); the rest as the source has it.
        assert (copy["mtime_ns"], copy["atime_ns"]) == (entry.mtime_ns, entry.atime_ns), entry.path
        for field in ("mode", "uid", "gid", "xattrs", "flags"):
            assert copy[field] == source[field], f"{entry.path}: {field}"
        if entry.extents is not None:
            assert copy["blocks"] == source["blocks"], f"{entry.path}: the allocation stays that of the data"
    groups: dict[str, set[object]] = {}
    for entry in supplied:
        if entry.kind == "file":
            key = entry.hardlink or entry.path
            groups.setdefault(key, set()).add(_independent(parent / "out", entry)["ino"])
    assert all(len(inodes) == 1 for inodes in groups.values()), "each hard-link group is one inode"


def test_conformance_passes_cp_a_on_the_new_checks_and_fails_a_lossy_copy_on_owner_xattrs_and_hardlinks(
        tmpfs_strict: Path) -> None:
    require_real_root("build the owners tree")
    base = tmpfs_strict / "lossy"
    base.mkdir()
    (base / "a").mkdir()
    (base / "b").mkdir()
    full = conformance.check("cp -a {src} {dst}", corpus=list(TREES), base=base / "a")
    for name in ("owner", "xattrs", "hardlinks", "sparse"):
        assert full.result(name).passed, (name, full.result(name).diagnosis)
    lossy = conformance.check("cp -r --preserve=mode,timestamps {src} {dst}", corpus=list(TREES), base=base / "b")
    assert {"owner", "xattrs", "hardlinks"} <= lossy.failed
    assert {f.diagnosis for f in lossy.result("owner").failures} == {"owner-differs"}
    assert "hardlink-split" in {f.diagnosis for f in lossy.result("hardlinks").failures}

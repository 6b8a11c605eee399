"""No privilege is ever granted by a download: ``owners="current"`` means the same for root as for anyone,
and a manifest that records no owners never yields a setuid file of someone who did not publish it.

A writer of the store can put any uid, mode and xattr into a manifest. These run as real root on a
tmpfs and a loop ext4 (the filesystems the metadata rows are checked on), with real setuid bits,
file capabilities and ``trusted.*`` xattrs, and read back what the download made.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.errors import NotRestorableError, ReownedWarning
from tests.support.capability import require_loop_devices, require_real_root, require_tool
from tests.support.hostile_store import forge_manifest, manifest_doc
from tests.support.mounts import Mounts

OLD = 1_000_000_000_123_456_789


@pytest.fixture(params=["tmpfs", "ext4"])
def fs(request: pytest.FixtureRequest, mounts: Mounts) -> Iterator[Path]:
    """A fresh directory on each filesystem, ``noatime`` (``readlink`` of a source link would move its atime)."""
    if request.param == "ext4":
        require_loop_devices()
        base = mounts.shared("ext4-noatime-full", lambda m: m.ext4("noatime", size_mb=128))
    else:
        base = mounts.shared("tmpfs-noatime-full", lambda m: m.tmpfs("noatime", size="2g"))
    yield Path(tempfile.mkdtemp(dir=base))


@pytest.fixture
def local_store_dir(fs: Path) -> Path:
    """The local case's store sits on the filesystem under test, as ``fs/store``."""
    return fs


def _download_current(store: Store, dest: Path) -> list[ReownedWarning]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.download("demo", dest, owners="current")
    return [w.message for w in caught if isinstance(w.message, ReownedWarning)]


def _entries(warning: ReownedWarning) -> list[str]:
    # vars(): the attribute is set on the instance, whether or not the class declares it.
    return list(vars(warning)["entries"])


def _capability(path: Path) -> str:
    return subprocess.run(["getcap", str(path)], capture_output=True, text=True, check=True).stdout.strip()


def test_owners_current_as_root_gives_every_entry_root_without_setuid_capabilities_or_privileged_xattrs(
        fs: Path, any_store: Store) -> None:
    require_real_root("give entries foreign owners, setuid bits, trusted.* xattrs and capabilities")
    require_tool("setcap", "libcap2-bin")
    src = fs / "src"
    (src / "d").mkdir(parents=True)
    tool = src / "d" / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    os.chown(tool, 1234, 1234)
    os.chmod(tool, 0o6755)  # noqa: S103 - the setuid/setgid file under test
    os.setxattr(tool, "user.origin", b"build 42")
    os.setxattr(tool, "trusted.note", b"planted")
    subprocess.run(["setcap", "cap_setuid,cap_setgid=ep", str(tool)], check=True)  # after chown, which clears it
    os.chown(src / "d", 1234, 5678)
    os.chmod(src / "d", 0o2755)  # noqa: S103 - a setgid directory of a foreign group
    os.symlink("tool", src / "d" / "link")
    os.lchown(src / "d" / "link", 4321, 8765)
    (src / "mine").write_bytes(b"root's own, nothing to change")
    own_setuid = src / "own-setuid"
    own_setuid.write_bytes(b"#!/bin/sh\n")
    os.chmod(own_setuid, 0o4755)  # noqa: S103 - root's own setuid file: the manifest is not trusted either
    for path in (tool, src / "d" / "link", src / "mine", own_setuid, src / "d", src):
        os.utime(path, ns=(OLD, OLD + 7), follow_symlinks=False)
    store = any_store
    store.publish(src, "demo")
    [warning] = _download_current(store, fs / "out")
    out = fs / "out"
    for path in (out, out / "d", out / "d" / "tool", out / "d" / "link", out / "mine", out / "own-setuid"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid()), path
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"{path}: {stat.filemode(st.st_mode)}"
    assert stat.S_IMODE(os.stat(out / "d" / "tool").st_mode) == 0o755
    assert os.listxattr(out / "d" / "tool") == ["user.origin"], "security.capability and trusted.note dropped"
    assert _capability(out / "d" / "tool") == ""
    listed = {entry.split(" (")[0]: entry for entry in _entries(warning)}
    assert sorted(listed) == ["d", "d/link", "d/tool", "own-setuid"], _entries(warning)
    assert all(part in listed["d/tool"] for part in ("uid 1234", "setuid", "security.capability", "trusted.note"))
    assert "setgid" in listed["d"] and "uid 4321" in listed["d/link"] and "setuid" in listed["own-setuid"]
    assert "4 entr" in str(warning) and len(str(warning)) < 1000


def test_the_reowned_warning_lists_every_entry_and_its_message_only_the_first_20(fs: Path, any_store: Store) -> None:
    require_real_root("give entries a foreign owner")
    src = fs / "src"
    src.mkdir()
    for number in range(30):
        path = src / f"f{number:02d}"
        path.write_bytes(b"x")
        os.chown(path, 1234, 1234)
    store = any_store
    store.publish(src, "demo")
    [warning] = _download_current(store, fs / "out")
    assert len(_entries(warning)) == 30
    assert "f19" in str(warning) and "f20" not in str(warning) and "30 entr" in str(warning)


def _as_format_1(store: Store) -> None:
    """Rewrite the only manifest as format 1, which records no owners, xattrs or flags."""
    ref = store.list()[-1]
    doc = manifest_doc(store, ref)
    doc["format"] = "artifactkit.manifest/1"
    for entry in doc["entries"]:
        for key in ("uid", "gid", "xattrs", "flags", "source_ctime_ns"):
            entry.pop(key, None)
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode())


def _setuid_tree(fs: Path, store: Store) -> Store:
    src = fs / "src"
    src.mkdir()
    (src / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(src / "tool", 0o6755)  # noqa: S103 - the setuid/setgid file under test
    (src / "plain").write_bytes(b"x")
    store.publish(src, "demo")
    _as_format_1(store)
    return store


def test_a_setuid_entry_without_a_recorded_owner_is_refused_by_an_exact_download(
        fs: Path, any_store: Store) -> None:
    store = _setuid_tree(fs, any_store)
    assert store.manifest("demo").entries[-1].uid is None
    with pytest.raises(NotRestorableError, match=r"tool: setuid/setgid with no recorded owner") as caught:
        store.download("demo", fs / "out")
    assert [entry.split(":")[0] for entry in caught.value.entries] == ["tool"]
    assert not (fs / "out").exists()


def test_a_setuid_entry_without_a_recorded_owner_loses_the_bits_with_owners_current(
        fs: Path, any_store: Store) -> None:
    store = _setuid_tree(fs, any_store)
    [warning] = _download_current(store, fs / "out")
    st = os.stat(fs / "out" / "tool")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o755)
    assert [entry.split(" (")[0] for entry in _entries(warning)] == ["tool"]
    assert "setuid/setgid" in _entries(warning)[0]

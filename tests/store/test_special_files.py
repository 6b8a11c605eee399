"""FIFOs, character and block devices through the store (issue 27): captured by ``lstat`` alone, kept in
the manifest with ``rdev`` as major/minor, restored with ``mkfifo``/``mknod`` in the same fd-relative,
read-back-verified restore. Sockets stay refused, every one named at once."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from artifactkit import Store, assert_metadata_equal, capture_tree, compare
from artifactkit.errors import IntegrityError, NotRestorableError, UnsupportedFileType
from artifactkit.metadata.model import FileMeta, capture
from tests.support.both_parses import parse_both
from tests.support.capability import can_own_for_others, require_real_root, require_tool
from tests.support.stores import is_bucket, root_directory_entries, stored_names

OLD = 1_000_000_000_123_456_789  # 2001, with every ns digit set
NOBODY = 65534


@pytest.fixture(params=["tmpfs", "ext4"])
def fs(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh directory on a strictatime tmpfs and on a loop ext4 (relatime): the issue's two filesystems."""
    base = request.getfixturevalue("tmpfs_strict" if request.param == "tmpfs" else "ext4_relatime")
    yield Path(tempfile.mkdtemp(dir=base))


def _old(path: Path, offset: int = 0) -> None:
    os.utime(path, ns=(OLD + offset, OLD + offset + 7), follow_symlinks=False)


def _devices(src: Path) -> None:
    os.mknod(src / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(src / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))  # overlayfs's whiteout
    os.mknod(src / "loop9", stat.S_IFBLK | 0o660, os.makedev(7, 9))
    os.mknod(src / "big", stat.S_IFCHR | 0o640, os.makedev(4095, (1 << 20) - 1))  # the largest the kernel keeps


def test_fifos_devices_and_a_hard_linked_fifo_round_trip_exact_in_every_field(fs: Path, any_store: Store) -> None:
    require_real_root("create device nodes and give them foreign owners")
    src = fs / "src"
    (src / "dev").mkdir(parents=True)
    os.mkfifo(src / "pipe", 0o640)
    os.link(src / "pipe", src / "dev" / "pipe-too")
    _devices(src / "dev")
    os.link(src / "dev" / "loop9", src / "loop9-too")  # a device's second name, in another directory
    os.chown(src / "dev" / "loop9", 0, 6)
    os.chown(src / "pipe", 1234, 5678)
    os.setxattr(src / "dev" / "null", "trusted.note", b"kept")
    for offset, path in enumerate(sorted(src.rglob("*"), reverse=True)):
        _old(path, offset)
    _old(src, 99)
    expected = capture_tree(src)
    assert {e.path: e.kind for e in expected if e.path != "."} == {
        "dev": "dir", "dev/big": "char", "dev/loop9": "block", "dev/null": "char", "dev/pipe-too": "fifo",
        "dev/whiteout": "char", "loop9-too": "block", "pipe": "fifo"}
    by_path = {e.path: e for e in expected}
    assert by_path["dev/null"].rdev == (1, 3) and by_path["dev/big"].rdev == (4095, (1 << 20) - 1)
    assert by_path["dev/whiteout"].rdev == (0, 0) and by_path["pipe"].rdev is None
    assert by_path["pipe"].hardlink == "dev/pipe-too" or by_path["dev/pipe-too"].hardlink == "pipe"
    store = any_store
    ref = store.publish(src, "dev")
    assert_metadata_equal(expected, store.manifest(ref).entries, stage="publish")
    store.download(ref, fs / "out")
    got = capture_tree(fs / "out")
    assert_metadata_equal(expected, got, stage="download")
    assert {e.path: e.rdev for e in got} == {e.path: e.rdev for e in expected}
    assert os.lstat(fs / "out" / "pipe").st_ino == os.lstat(fs / "out" / "dev" / "pipe-too").st_ino
    assert os.lstat(fs / "out" / "dev" / "loop9").st_rdev == os.makedev(7, 9)
    assert os.lstat(fs / "out" / "dev" / "loop9").st_ino == os.lstat(fs / "out" / "loop9-too").st_ino
    assert capture_tree(src) == expected, "publishing opened nothing: the source is as it was"


def test_the_manifest_records_rdev_as_major_and_minor(fast_tmp: Path, any_store: Store) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    os.mknod(src / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))  # any user may (Linux >= 5.8)
    store = any_store
    ref = store.publish(src, "p")
    lines = {entry["path"]: entry for entry in root_directory_entries(store, ref)}
    assert lines["whiteout"]["kind"] == "char" and lines["whiteout"]["rdev"] == [0, 0]
    assert lines["pipe"]["kind"] == "fifo" and "rdev" not in lines["pipe"] and "sha256" not in lines["pipe"]


def _manifest_with(entry: dict[str, object]) -> bytes:
    root = {"path": ".", "kind": "dir", "mode": 0o755, "mtime_ns": 1, "atime_ns": 1}
    return json.dumps({"format": "artifactkit.manifest/2", "name": "x", "entries": [root, entry]}).encode()


_FIFO = {"path": "p", "kind": "fifo", "mode": 0o644, "mtime_ns": 1, "atime_ns": 1}
_CHAR = {**_FIFO, "kind": "char", "rdev": [1, 3]}


@pytest.mark.parametrize("forged", [
    {**_CHAR, "rdev": None}, {**_CHAR, "rdev": [4096, 0]}, {**_CHAR, "rdev": [0, 1 << 20]}, {**_CHAR, "rdev": [1]},
    {**_CHAR, "rdev": [1, -3]}, {**_CHAR, "rdev": "1:3"}, {**_CHAR, "rdev": [True, 3]}, {**_FIFO, "rdev": [1, 3]},
    {**_FIFO, "flags": 0}, {**_FIFO, "extents": []}, {**_FIFO, "kind": "socket"},
], ids=["no-rdev", "major-too-big", "minor-too-big", "one-number", "negative", "text", "bool", "fifo-with-rdev",
        "fifo-with-flags", "fifo-with-extents", "socket"])
def test_a_forged_special_entry_is_an_integrity_error(forged: dict[str, object]) -> None:
    with pytest.raises(IntegrityError):
        parse_both(_manifest_with(forged), where="m")


def test_a_special_entry_reads_back_with_its_rdev() -> None:
    entries = parse_both(_manifest_with(_CHAR), where="m").entries
    assert entries[1] == FileMeta("p", "char", 0o644, 1, 1, rdev=(1, 3))


def test_a_hard_link_between_a_fifo_and_a_file_is_an_integrity_error() -> None:
    root = {"path": ".", "kind": "dir", "mode": 0o755, "mtime_ns": 1, "atime_ns": 1}
    doc = {"format": "artifactkit.manifest/2", "name": "x", "entries": [
        root, {**_FIFO, "path": "a"}, {**_CHAR, "path": "b", "hardlink": "a"}]}
    with pytest.raises(IntegrityError, match="hard link"):
        parse_both(json.dumps(doc).encode(), where="m")


def test_every_socket_of_a_source_is_named_at_once(fast_tmp: Path, any_store: Store) -> None:
    src = fast_tmp / "src"
    (src / "run").mkdir(parents=True)
    os.mkfifo(src / "pipe")
    for name in ("a.sock", "run/b.sock"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(src / name))
    with pytest.raises(UnsupportedFileType, match=r"a\.sock.*run/b\.sock") as caught:
        Store(any_store.root).publish(src, "s")
    assert caught.value.paths == ["a.sock", "run/b.sock"]  # type: ignore[attr-defined]
    assert stored_names(any_store, "manifests/s") == []


def test_capture_of_a_fifo_never_opens_it(fast_tmp: Path) -> None:
    # Opening a FIFO for reading blocks until a writer comes: a capture that did would hang here.
    os.mkfifo(fast_tmp / "p", 0o600)
    meta = capture(fast_tmp / "p", root=fast_tmp)
    assert (meta.kind, meta.mode, meta.rdev, meta.size) == ("fifo", 0o600, None, 0)


def publish_and_download(work: str, owners: str, root: str = "") -> dict[str, object]:
    """Publish ``work/src`` and download it to ``work/out`` as this process, through the store at ``root``
    (``work/store`` by default): what was refused, or what differs."""
    store = Store(root or f"{work}/store")
    ref = store.publish(f"{work}/src", "t")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            store.download(ref, f"{work}/out", owners=owners)  # type: ignore[arg-type]
    except NotRestorableError as err:
        return {"refused": err.entries, "out": os.path.lexists(f"{work}/out")}  # type: ignore[attr-defined]
    found = compare(capture_tree(f"{work}/src"), capture_tree(f"{work}/out"))
    return {"mismatches": [str(m) for m in found], "warned": [str(w.message) for w in seen]}


_AS_USER = ("import json, sys; from tests.store.test_special_files import publish_and_download; "
            "print(json.dumps(publish_and_download(*sys.argv[1:])))")
_REPO = Path(__file__).resolve().parents[2]


def _as_normal_user(work: Path, store: Store, owners: str = "exact") -> dict[str, object]:
    """Publish ``work/src`` and download it as a user without CAP_MKNOD: ``nobody`` in a child when we are
    root, else this process itself. Through ``store`` if it is a bucket's (the child inherits the AWS
    environment); a local store goes in ``work``, where that user may write."""
    root = str(store.root) if is_bucket(store) else ""
    if not can_own_for_others():  # a user, or root of a user namespace (which cannot become nobody)
        return publish_and_download(str(work), owners, root)
    require_tool("setpriv", "util-linux")
    os.chmod(work, 0o777)  # noqa: S103 - the unprivileged downloader writes its store and output here
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
    done = subprocess.run([*prefix, sys.executable, "-c", _AS_USER, str(work), owners, root], capture_output=True,
                          text=True, check=False, cwd=_REPO)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory on a tmpfs every user can reach (the session's mounts sit in root's 0700 directories)."""
    path = Path(tempfile.mkdtemp(prefix="artifactkit-special-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _user_tree(work: Path) -> Path:
    src = work / "src"
    src.mkdir()
    os.chmod(src, 0o755)  # noqa: S103 - the unprivileged publisher lists it
    os.mkfifo(src / "pipe", 0o644)
    os.link(src / "pipe", src / "pipe2")
    _old(src / "pipe")
    _old(src, 5)
    return src


def test_a_normal_user_round_trips_fifos_exactly(shared_tmp: Path, any_store: Store) -> None:
    work = shared_tmp
    src = _user_tree(work)
    if can_own_for_others():  # real root: the tree is nobody's, who downloads it (see _as_normal_user)
        os.chown(src, NOBODY, NOBODY)
        os.chown(src / "pipe", NOBODY, NOBODY)
    assert _as_normal_user(work, any_store) == {"mismatches": [], "warned": []}


def test_a_normal_users_download_of_devices_is_refused_up_front_naming_each(
        shared_tmp: Path, any_store: Store) -> None:
    require_real_root("create the device nodes a normal user then downloads")
    work = shared_tmp
    src = _user_tree(work)
    (src / "dev").mkdir(mode=0o755)
    _devices(src / "dev")
    for path in (src, src / "pipe", src / "dev", *(src / "dev").iterdir()):
        os.chown(path, NOBODY, NOBODY)
    result = _as_normal_user(work, any_store)
    refused = result["refused"]
    assert isinstance(refused, list) and result["out"] is False
    assert sorted(refused) == ["dev/big: char device 4095,1048575 (creating a device node needs CAP_MKNOD)",
                               "dev/loop9: block device 7,9 (creating a device node needs CAP_MKNOD)",
                               "dev/null: char device 1,3 (creating a device node needs CAP_MKNOD)"], \
        "the whiteout (0,0) is not refused: any user may create it"


def test_owners_current_never_creates_a_device_and_says_which(fs: Path, any_store: Store) -> None:
    require_real_root("create device nodes")
    src = fs / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    _devices(src)
    store = any_store
    ref = store.publish(src, "d")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotRestorableError, match="owners=\"current\" never creates a device") as caught:
            store.download(ref, fs / "out", owners="current")
    assert sorted(caught.value.entries) == [  # type: ignore[attr-defined]
        "big: char device 4095,1048575 (owners=\"current\" never creates a device node)",
        "loop9: block device 7,9 (owners=\"current\" never creates a device node)",
        "null: char device 1,3 (owners=\"current\" never creates a device node)"]
    assert not os.path.lexists(fs / "out")
    assert [p.name for p in fs.iterdir() if p.name.startswith(".out.")] == []


def test_fifos_and_the_whiteout_of_a_download_in_many_batches_are_exact(fast_tmp: Path, any_store: Store) -> None:
    src = fast_tmp / "src"
    for group in range(3):
        (src / f"d{group}").mkdir(parents=True)
        for index in range(100):
            path = src / f"d{group}" / f"p{index}"
            if index % 10:
                os.mkfifo(path, 0o600 | index)
            else:
                os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(0, 0))
            _old(path, index)
    expected = capture_tree(src)
    store = any_store
    store.download(store.publish(src, "many"), fast_tmp / "out", workers=2)
    assert_metadata_equal(expected, capture_tree(fast_tmp / "out"), stage="download")


def test_a_split_hard_link_of_a_fifo_is_a_hardlink_split() -> None:
    first = FileMeta("a", "fifo", 0o600, 1, 1, uid=0, gid=0, xattrs=())
    second = FileMeta("b", "fifo", 0o600, 1, 1, uid=0, gid=0, xattrs=(), hardlink="a")
    found = compare([first, second], [first, attrs.evolve(second, hardlink=None)])
    assert [(m.path, m.field, m.diagnosis) for m in found] == [("b", "hardlink", "hardlink-split")]


def test_a_stat_cached_republish_of_fifos_and_the_whiteout_records_the_same_manifest(
        fast_tmp: Path, any_store: Store) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    os.link(src / "pipe", src / "pipe2")
    os.mknod(src / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    for path in (src / "pipe", src / "whiteout", src):
        _old(path)
    store = any_store
    first = store.publish(src, "c", stat_cache=True)
    second = store.publish(src, "c", stat_cache=True)
    assert store.manifest(first).entries == store.manifest(second).entries
    store.download(second, fast_tmp / "out")
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "out"), stage="download")

"""The FUSE rows of the filesystem matrix: probe, strict fixture, times and store on sshfs, weed mount, s3fs,
rclone mount, bindfs, mergerfs and squashfuse (root only; ``tests/support/fuse_matrix.MATRIX``).

Each row is mounted once per session and probed once; every pinned verdict is checked against the
backing directory where the row has one, never against the probe's own output. The store round
trips are pinned, refusals included; the last section holds the store's own handling of what these
filesystems cannot do (issue 49 item 2), each on the real mount.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit._fsutil import remove_tree
from artifactkit.cli.common import EXIT_SETUP, exit_code_of
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import MetadataMismatchError, NotRestorableError
from artifactkit.isolation.probe import HISTORICAL_NS, read_moves_atime, write_file
from artifactkit.isolation.reading import read_file
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.store.store import Store
from tests.support.capability import skip_or_fail
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.fuse_matrix import (
    HISTORICAL,
    MATRIX,
    NS_PER_S,
    VARIANTS,
    FuseRig,
    FuseSpec,
    errno_tag,
    fixture_outcome,
    store_round_trip,
)
from tests.support.fuse_mounts import FuseMounts, require_fuse_tools
from tests.support.mounts import Mounts, mounts_under

REPO = Path(__file__).resolve().parent.parent
#: Longer than every kernel attribute timeout of these mounts (1 s): what the mount shows then is its daemon's.
PAST_KERNEL_CACHE_S = 1.6


@pytest.fixture(params=MATRIX, ids=lambda spec: spec.name)
def spec(request: pytest.FixtureRequest) -> FuseSpec:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def rig(spec: FuseSpec, fuse_rig: FuseRig) -> FuseRig:
    require_fuse_tools(*spec.tools)
    try:
        fuse_rig.mount(spec)
    except RuntimeError as err:
        skip_or_fail(f"{spec.name} did not mount: {err}")
    return fuse_rig


@pytest.fixture
def work(spec: FuseSpec, rig: FuseRig) -> Iterator[Path]:
    """A fresh directory on the row's mount (the mount itself where nothing can be made: squashfuse)."""
    point = rig.mount(spec).point
    try:
        path = Path(tempfile.mkdtemp(prefix="work-", dir=point))
    except OSError:
        yield point
        return
    yield path
    remove_tree(path)


def test_the_probe_reports_what_the_fuse_filesystem_really_is(spec: FuseSpec, rig: FuseRig, work: Path) -> None:
    found = rig.probe(spec)
    if isinstance(found, OSError):
        assert {"error": errno_tag(found)} == spec.probe
        return
    doc = found.to_json()
    assert {key: doc[key] for key in spec.probe} == spec.probe
    mount = rig.mount(spec)
    if mount.backing is None:
        return
    # The backing truth: does a read through the mount move the historical atime the server holds?
    path = work / "truth"
    backing = mount.backing / path.relative_to(mount.point)
    write_file(str(path))
    os.utime(path, ns=(HISTORICAL_NS, HISTORICAL_NS))
    held = os.lstat(backing).st_atime_ns
    read_file(str(path))
    assert found.reads_move_historical_atime == (os.lstat(backing).st_atime_ns != held)


def test_the_strict_fixture_refuses_every_cache_and_what_cannot_be_isolated(
        spec: FuseSpec, rig: FuseRig, work: Path) -> None:
    found = rig.probe(spec)
    before = set(os.listdir(work))
    assert fixture_outcome(work, None if isinstance(found, OSError) else found) == spec.fixture
    assert set(os.listdir(work)) == before, "the fixture leaves nothing behind, refused or not"


def test_times_set_through_the_mount_are_what_the_backing_directory_holds(
        spec: FuseSpec, rig: FuseRig, work: Path) -> None:
    mount = rig.mount(spec)
    paths = {}
    for value in spec.times:
        paths[value] = path = work / f"t{len(paths)}"
        write_file(str(path))
        os.utime(path, ns=(value, value))
    started = time.time_ns()
    if mount.backing is None:
        time.sleep(PAST_KERNEL_CACHE_S)  # the daemon's answer, not the kernel's copy of what was just set
    for value, path in paths.items():
        truth = mount.backing / path.relative_to(mount.point) if mount.backing else path
        held = os.lstat(truth).st_mtime_ns
        expected = spec.times[value]
        if expected is None:
            assert started - 5 * 10**9 <= held <= time.time_ns(), f"{value} became {held}, not the time of the call"
        else:
            assert held == expected, f"mtime {value} set through {spec.name} is held as {held}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_store_round_trip_does_what_is_pinned(
        spec: FuseSpec, rig: FuseRig, work: Path, fuse_local: Path, variant: str) -> None:
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    try:
        store_dir = (work if variant in ("both", "store-only") else local) / "store"
        dest_parent = work if variant in ("both", "dest-only") else local
        assert store_round_trip("basic", fuse_local, store_dir, dest_parent) == spec.round_trips[variant]
    finally:
        remove_tree(local)


# -- the acceptance of issue 49 item 1 ----------------------------------------------------------------

INNER_TEST = """
import os

def test_a_read_leaves_atime_alone(noatime_tree):
    path = noatime_tree / "f"
    path.write_bytes(b"x")
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    path.read_bytes()
    assert os.lstat(path).st_atime_ns == 1_000_000_000_000_000_000
"""


def test_on_default_sshfs_a_test_whose_atime_the_server_moved_errors_instead_of_passing(
        fuse_rig: FuseRig, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    sshfs = next(spec for spec in MATRIX if spec.name == "sshfs")
    require_fuse_tools(*sshfs.tools)
    mount = fuse_rig.mount(sshfs)
    assert mount.backing is not None
    base = Path(tempfile.mkdtemp(prefix="base-", dir=mount.point))
    try:
        # What the inner test would see without the fixture: the cache says "unchanged", the server moved it.
        path = str(base / "lie")
        write_file(path)
        assert not read_moves_atime(path, HISTORICAL_NS)
        assert os.lstat(mount.backing / base.name / "lie").st_atime_ns != HISTORICAL_NS // 10**9 * 10**9
        os.unlink(path)
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        pytester.makepyfile(INNER_TEST)
        result = pytester.runpytest_subprocess(f"--artifactkit-base={base}", "-p", "no:cacheprovider")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*client cache*remedy: mount it with the client's attribute caches off*"])
    finally:
        remove_tree(base)


def test_a_busy_fuse_mount_is_still_unmounted_and_its_daemon_stopped_at_teardown(mounts: Mounts) -> None:
    require_fuse_tools("bindfs")
    fuse = FuseMounts(mounts)
    mount = fuse.bindfs()
    held = open(mount.point / "held", "w")  # noqa: SIM115 - held open across close() on purpose
    daemons = [proc.pid for _, proc in fuse._started]
    try:
        fuse.close()
    finally:
        held.close()
    assert (mounts_under(fuse.base), fuse.base.exists()) == ([], False)
    assert [pid for pid in daemons if os.path.exists(f"/proc/{pid}")] == []


# -- issue 49 item 2: the store's own handling of what these filesystems cannot do -------------------------------

#: Whole seconds inside SFTP v3's unsigned 32-bit range: what sshfs can hold exactly.
WHOLE_S = 1_000_000_000 * NS_PER_S


def _published(local: Path, *, xattr: bool) -> tuple[Store, Path]:
    """A store on the local tmpfs holding a small tree sshfs can hold (whole seconds, no link), with or without
    a ``user.*`` xattr on its file."""
    return _published_to(local, local / "store", xattr=xattr)


def _published_to(local: Path, store_dir: Path, *, xattr: bool = False,
                  times: tuple[int, int] = (WHOLE_S + NS_PER_S, WHOLE_S)) -> tuple[Store, Path]:
    src = local / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"data\n")
    if xattr:
        os.setxattr(src / "d" / "f", "user.origin", b"ci")
    for path in (src / "d" / "f", src / "d", src):
        os.utime(path, ns=times)
    store = Store(store_dir)
    store.publish(src, "tree")
    return store, src


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_tree_without_xattrs_downloads_onto_sshfs_whose_listxattr_is_unsupported(
        fuse_rig: FuseRig, fuse_local: Path, engine: str) -> None:
    point = fuse_rig.row("sshfs").point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    work = Path(tempfile.mkdtemp(prefix="work-", dir=point))
    try:
        with running_on(engine):
            store, src = _published(local, xattr=False)
            store.download("tree", work / "dest")
            assert_metadata_equal(capture_tree(src), capture_tree(work / "dest"), stage="download")
    finally:
        remove_tree(local)
        remove_tree(work)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_xattrs_onto_sshfs_are_refused_as_the_filesystem_s_lack_and_nothing_is_left(
        fuse_rig: FuseRig, fuse_local: Path, engine: str) -> None:
    point = fuse_rig.row("sshfs").point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    work = Path(tempfile.mkdtemp(prefix="work-", dir=point))
    try:
        with running_on(engine):
            store, _ = _published(local, xattr=True)
            with pytest.raises(NotRestorableError, match=r"cannot restore the xattrs of 'd/f' here: this "
                                                         r"filesystem does not support xattrs \(") as refused:
                store.download("tree", work / "dest")
        assert "tamper" not in str(refused.value) and "swapped" not in str(refused.value)
        assert os.listdir(work) == []
    finally:
        remove_tree(local)
        remove_tree(work)


@pytest.mark.parametrize("row", ["s3fs", "rclone-mount"])
def test_a_filesystem_that_ignores_mkdir_s_mode_is_named_not_called_a_swap_and_nothing_is_left(
        fuse_rig: FuseRig, fuse_local: Path, row: str) -> None:
    point = fuse_rig.row(row).point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    work = point / f"work-{os.getpid()}-{row}"
    work.mkdir()
    try:
        store, _ = _published(local, xattr=False)
        with pytest.raises(NotRestorableError, match=r"this filesystem \(fuse\.\w+\) does not apply mode 0700 "
                                                     r"to the private directory .*/\.dest\.artifactkit-") as refused:
            store.download("tree", work / "dest")
        assert "swapped" not in str(refused.value)
        assert os.listdir(work) == []
    finally:
        remove_tree(local)
        remove_tree(work)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("row", ["s3fs", "rclone-mount"])
def test_a_store_on_a_filesystem_without_an_atomic_no_replace_commit_says_so_and_leaves_no_version(
        fuse_rig: FuseRig, fuse_local: Path, row: str, engine: str) -> None:
    point = fuse_rig.row(row).point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    store_dir = point / f"store-{os.getpid()}-{row}-{engine}"
    try:
        with running_on(engine):
            with pytest.raises(OSError, match=r"cannot commit atomically: this filesystem \(fuse\.\w+\) supports "
                                              r"neither renameat2\(RENAME_NOREPLACE\) \(EINVAL\) nor link\(2\) "
                                              r"\((ENOTSUP|EIO)\)") as refused:
                _published_to(local, store_dir)
            assert refused.value.errno in (errno.ENOTSUP, errno.EIO, errno.EINVAL)
            assert exit_code_of(refused.value) == EXIT_SETUP
            assert Store(store_dir).list() == []
            left = [p for p in store_dir.rglob("*") if p.is_file() and p.parent != store_dir / "locks"]
            assert left == [], "no staged, moved or committed file is left (only the store's own locks)"
    finally:
        remove_tree(local)
        remove_tree(store_dir)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_on_weed_mount_a_download_is_verified_past_the_attribute_cache_and_never_certifies_a_lost_atime(
        fuse_rig: FuseRig, fuse_local: Path, engine: str) -> None:
    point = fuse_rig.row("weed-mount").point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    work = point / f"work-{os.getpid()}-{engine}"
    work.mkdir()
    try:
        with running_on(engine):
            # Files only, each read back at once, inside weed's 1 s attribute cache (a directory's times are set
            # last, and its read-back can come after the cache expired).
            src = local / "src"
            src.mkdir()
            for name in ("a", "b"):
                (src / name).write_bytes(name.encode())
                os.utime(src / name, ns=(HISTORICAL + 365 * 86_400 * NS_PER_S, HISTORICAL))
            store = Store(local / "store")
            store.publish(src, "tree")
            # weed keeps no atime: once its 1 s cache is gone atime reads back as mtime. "Exact" would be a lie.
            with pytest.raises(MetadataMismatchError, match=r"\n  a\n    atime_ns: expected .*set-to-mtime"):
                store.download("tree", work / "dest")
        assert os.listdir(work) == []
    finally:
        remove_tree(local)
        remove_tree(work)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_publish_from_rclone_mount_names_the_file_the_calls_and_the_source_s_filesystem(
        fuse_rig: FuseRig, fuse_local: Path, engine: str) -> None:
    point = fuse_rig.row("rclone-mount").point
    local = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    src = point / f"src-{os.getpid()}-{engine}"
    src.mkdir()
    try:
        (src / "a.txt").write_bytes(b"a\n")
        with running_on(engine), pytest.raises(OSError) as refused:
            Store(local / "store").publish(src, "tree")
        assert refused.value.errno == errno.EIO
        assert refused.value.filename in (str(src), str(src / "a.txt"))
        assert "the source's filesystem failed llistxattr/lgetxattr (Input/output error)" in str(refused.value)
    finally:
        remove_tree(local)
        remove_tree(src)

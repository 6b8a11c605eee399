"""A download on a FUSE mount never says "verified exact" for a value a daemon's own cache may be showing, and a
filesystem that forces an owner on what it shows is named, not called a swap (issue 49 items 1 and 2; root only,
real mounts from ``tests/support/fuse_matrix.MATRIX``).

sshfs keeps attributes by path for 20 s whatever the kernel's ``attr_timeout`` says: a time the server moved a
moment after the download set it read back unchanged past the kernel's timeout, and the download said "verified
exact". Now its read-back is made under a fresh name, shown fresh by a calibration beside the tree; where no such
look can be shown fresh (no hard link: mergerfs with ``func.link=erofs``, s3fs, rclone mount) the times are named
unverified in the download's result, ``--json`` and its line.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit._fsutil import remove_tree
from artifactkit.cli.main import main
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import MetadataMismatchError, NotRestorableError
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.store import download
from artifactkit.store.store import Store
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.fuse_matrix import NS_PER_S, FuseRig
from tests.support.fuse_mounts import FuseMount

#: Whole seconds inside SFTP v3's unsigned 32-bit range (what sshfs holds); atime before mtime, so that a read
#: on the server's relatime tmpfs moves it.
WHOLE_S = 1_000_000_000 * NS_PER_S
TIMES = (WHOLE_S, WHOLE_S + NS_PER_S)
VERIFIED_LINE = "every entry verified exact (mode, owner, xattrs, links, holes, flags, mtime_ns, atime_ns)"


@pytest.fixture
def local(fuse_local: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="local-", dir=fuse_local))
    yield path
    remove_tree(path)


def _published(local: Path) -> tuple[Store, Path]:
    src = local / "src"
    (src / "d").mkdir(parents=True)
    for name in ("a", "d/b"):
        (src / name).write_bytes(name.encode())
    for path in (src / "a", src / "d" / "b", src / "d", src):
        os.utime(path, ns=TIMES)
    store = Store(local / "store")
    store.publish(src, "tree")
    return store, src


def _work(mount: FuseMount, label: str) -> Path:
    work = mount.point / f"work-{os.getpid()}-{label}-{time.monotonic_ns()}"
    work.mkdir()
    return work


def _download_cli(store: Store, dest: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str]:
    """The CLI's ``--json`` document for a download to ``dest``, and its text line for another one beside it."""
    assert main(["download", "tree", str(dest), "--store", str(store.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["download", "tree", f"{dest}-text", "--store", str(store.root)]) == 0
    return doc, capsys.readouterr().out


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_on_default_sshfs_a_time_the_server_moved_behind_sshfs_s_own_cache_is_refused_not_verified(
        fuse_rig: FuseRig, local: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    mount = fuse_rig.row("sshfs")
    assert mount.backing is not None
    work = _work(mount, engine)
    served = mount.backing / work.relative_to(mount.point)
    real_sleep = time.sleep
    read_on_the_server: list[Path] = []

    def the_server_reads_while_the_kernel_cache_runs_out(seconds: float) -> None:
        # Something on the server (an indexer, a backup) reads the staged files once the download has set and
        # read back their times: the relatime tmpfs moves atime; sshfs keeps showing its copy for 20 s.
        for path in served.glob(".dest.artifactkit-*/tree/**/*"):
            if path.is_file():
                path.read_bytes()
                read_on_the_server.append(path)
        real_sleep(seconds)

    try:
        with running_on(engine):
            store, _ = _published(local)
            monkeypatch.setattr(download.time, "sleep", the_server_reads_while_the_kernel_cache_runs_out)
            with pytest.raises(MetadataMismatchError, match=r"\n  a\n    atime_ns: expected 1000000000000000000, "
                                                             r"actual \d+ \(delta \+\d+ ns\): advanced-by-read"):
                store.download("tree", work / "dest")
        assert len(read_on_the_server) == 2, "the server read both staged files (and listed their directories)"
        assert os.listdir(work) == [], "nothing is made visible, no private directory is left"
    finally:
        remove_tree(work)


# Each case waits out the kernel's cache three times (4.5 s): sshfs, whose daemon cache is the story, on both
# engines; the rows without a daemon cache once each, one per engine (the read-back is the store's, not an engine's).
@pytest.mark.parametrize(("row", "engine"), [("sshfs", "native"), ("sshfs", "python"), ("sshfs-no-cache", "native"),
                                             ("bindfs", "python")])
def test_a_download_whose_look_past_the_caches_is_shown_fresh_is_verified_exact(
        fuse_rig: FuseRig, local: Path, capsys: pytest.CaptureFixture[str], row: str, engine: str) -> None:
    mount = fuse_rig.row(row)
    work = _work(mount, engine)
    try:
        with running_on(engine):
            store, src = _published(local)
            assert store.download("tree", work / "dest").unverified == ()
            doc, line = _download_cli(store, work / "cli", capsys)
        assert (doc["dest_verified"], doc["unverified"]) == (True, [])
        assert VERIFIED_LINE in line
        for dest in ("dest", "cli", "cli-text"):
            assert_metadata_equal(capture_tree(src), capture_tree(work / dest), stage="download")
        assert sorted(os.listdir(work)) == ["cli", "cli-text", "dest"], "no calibration or private directory left"
    finally:
        remove_tree(work)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_where_no_look_past_a_cache_can_be_shown_fresh_the_times_are_named_unverified_never_exact(
        fuse_rig: FuseRig, local: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    mount = fuse_rig.row("mergerfs-no-link")
    work = _work(mount, engine)
    try:
        with running_on(engine):
            store, src = _published(local)
            assert store.download("tree", work / "dest").unverified == ("mtime_ns", "atime_ns")
            doc, line = _download_cli(store, work / "cli", capsys)
        assert (doc["dest_verified"], doc["unverified"]) == (False, ["mtime_ns", "atime_ns"])
        assert "verified exact (mode, owner, xattrs, links, holes, flags) but mtime_ns, atime_ns: unverified " \
               "(client-cached attributes" in line
        assert VERIFIED_LINE not in line
        # What was read back is what was set (a time seen moved would have been refused): only its proof is missing.
        assert_metadata_equal(capture_tree(src), capture_tree(work / "dest"), stage="download")
    finally:
        remove_tree(work)


@pytest.fixture(scope="module")
def rclone_forced_owner(fuse_rig: FuseRig) -> FuseMount:
    fuse_rig.row("rclone-mount")  # its tools, and the server every rclone mount here serves from
    return fuse_rig.fuse.rclone(fuse_rig.seaweed, "rclone-uid",
                                ["--vfs-cache-mode", "writes", "--uid", "4242", "--gid", "4242"])


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("row", ["bindfs-force-user", "rclone --uid 4242"])
def test_a_filesystem_that_forces_an_owner_is_named_not_called_a_swap_and_nothing_is_left(
        fuse_rig: FuseRig, local: Path, request: pytest.FixtureRequest, row: str, engine: str) -> None:
    mount = fuse_rig.row(row) if row == "bindfs-force-user" else request.getfixturevalue("rclone_forced_owner")
    forced = 65534 if row == "bindfs-force-user" else 4242
    work = _work(mount, engine)
    try:
        with running_on(engine):
            store, _ = _published(local)
            with pytest.raises(NotRestorableError, match=rf"this filesystem \(fuse(\.rclone)?\) does not apply our "
                                                         rf"owner to the private directory .*/\.dest\.artifactkit-\w+ "
                                                         rf"\(it and a file made beside it read uid {forced}, not "
                                                         rf"{os.geteuid()}\)") as refused:
                store.download("tree", work / "dest")
        assert "swapped" not in str(refused.value)
        assert os.listdir(work) == []
        if mount.backing is not None:
            assert os.listdir(mount.backing / work.relative_to(mount.point)) == [], "nothing left on the server"
    finally:
        remove_tree(work)

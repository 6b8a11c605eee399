"""Full disk, read-only store, unwritable destination: a clear error, earlier versions intact, no debris."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store, assert_metadata_equal
from artifactkit.conformance.corpus import TreeSpec, content, load_tree, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata.model import FileMeta
from tests.support.capability import in_user_namespace, require_loop_devices, skip_or_fail
from tests.support.crash import snapshot
from tests.support.mounts import Mounts
from tests.support.stores import store_snapshot


def errno_of(err: BaseException) -> int | None:
    """The errno a failure carries, directly or as the cause the store kept."""
    while err is not None:
        if isinstance(err, OSError) and err.errno is not None:
            return err.errno
        err = err.__cause__  # type: ignore[assignment]
    return None


def big_tree(size: int) -> TreeSpec:
    """The basic tree plus one file of ``size`` bytes (streamed if above the in-memory limit)."""
    basic = load_tree("basic")
    big = FileMeta(path="big.bin", kind="file", mode=0o644, size=size, mtime_ns=1_650_000_000_000_000_001,
                   atime_ns=1_650_000_000_000_000_002, sha256=hashlib.sha256(content(77, size)).hexdigest())
    return TreeSpec("big", "basic plus one big file", (*basic.entries, big), dict(basic.seeds, **{"big.bin": 77}))


def remount(point: Path, mode: str) -> None:
    # In a user namespace mount(8) replays tmpfs' uid=/gid= options, host ids that are unmapped
    # there (EINVAL); a bind remount flips only the mount's own read-only flag: the same EROFS.
    options = f"remount,bind,{mode}" if in_user_namespace() else f"remount,{mode}"
    subprocess.run(["mount", "-o", options, str(point)], check=True, capture_output=True)


@pytest.fixture
def read_only_afterwards(mounts: Mounts) -> Iterator[list[Path]]:
    """Mounts a test turns read-only are made writable again, even when the test fails."""
    points: list[Path] = []
    yield points
    for point in points:
        remount(point, "rw")


@pytest.mark.parametrize("size", [3 << 20, 12 << 20], ids=["in-memory", "streamed"])
def test_a_publish_that_fills_the_store_fails_with_enospc_and_leaves_earlier_versions_intact(
        mounts: Mounts, fast_tmp: Path, size: int) -> None:
    small = mounts.tmpfs("relatime", size="2m")
    supplied = materialize("basic", fast_tmp / "src1")
    materialize(big_tree(size), fast_tmp / "src2")
    store = Store(small / "store")
    store.publish(fast_tmp / "src1", "demo")
    with pytest.raises(OSError) as caught:
        store.publish(fast_tmp / "src2", "demo")
    assert errno_of(caught.value) == errno.ENOSPC, caught.value
    assert [str(ref) for ref in store.list()] == ["demo@1"]
    assert os.listdir(store.layout.staging_dir) == [], "the failed publish removed its own staging"
    store.gc()
    assert store.verify().clean
    store.download("demo", fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="after ENOSPC")


def test_a_download_that_fills_the_destination_fails_with_enospc_and_leaves_nothing(
        mounts: Mounts, fast_tmp: Path, any_store: Store) -> None:
    materialize(big_tree(6 << 20), fast_tmp / "src")
    store = any_store
    store.publish(fast_tmp / "src", "demo")
    before = store_snapshot(store)
    small = mounts.tmpfs("relatime", size="4m")
    with pytest.raises(OSError) as caught:
        store.download("demo", small / "dest")
    assert errno_of(caught.value) == errno.ENOSPC, caught.value
    assert os.listdir(small) == [], "no partial destination and no staging directory"
    assert store_snapshot(store) == before


def test_a_read_only_store_refuses_publish_and_gc_with_erofs_but_still_serves_downloads(
        mounts: Mounts, fast_tmp: Path, read_only_afterwards: list[Path]) -> None:
    require_loop_devices()
    point = mounts.ext4("relatime", size_mb=32)
    supplied = materialize("basic", fast_tmp / "src")
    store = Store(point / "store")
    store.publish(fast_tmp / "src", "demo")
    remount(point, "ro")
    read_only_afterwards.append(point)
    before = snapshot(point / "store")
    for action in (lambda: store.publish(fast_tmp / "src", "demo"), store.gc):
        with pytest.raises(OSError) as caught:
            action()
        assert caught.value.errno == errno.EROFS, caught.value
        assert caught.value.filename is not None and str(point) in str(caught.value.filename)
    report = store.verify()
    assert report.clean
    store.download("demo", fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="from a read-only store")
    assert snapshot(point / "store") == before


def test_an_unwritable_destination_raises_a_clear_error_and_leaves_the_store_as_it_was(
        mounts: Mounts, fast_tmp: Path, any_store: Store, read_only_afterwards: list[Path]) -> None:
    materialize("basic", fast_tmp / "src")
    store = any_store
    store.publish(fast_tmp / "src", "demo")
    before = store_snapshot(store)
    read_only = mounts.tmpfs("relatime", size="4m")
    remount(read_only, "ro")
    read_only_afterwards.append(read_only)
    with pytest.raises(OSError) as caught:
        store.download("demo", read_only / "dest")
    assert caught.value.errno == errno.EROFS
    assert store_snapshot(store) == before


def test_a_destination_in_a_directory_nobody_may_write_is_a_permission_error(
        fast_tmp: Path, any_store: Store) -> None:
    materialize("basic", fast_tmp / "src")
    store = any_store
    store.publish(fast_tmp / "src", "demo")
    before = store_snapshot(store)
    locked = fast_tmp / "locked"
    locked.mkdir(mode=0o555)
    immutable = os.access(locked, os.W_OK)  # root ignores modes: only the immutable flag stops it
    if immutable and subprocess.run(["chattr", "+i", str(locked)], capture_output=True, check=False).returncode:
        skip_or_fail("needs an unwritable directory: mode 0555 does not stop this process (DAC override) and "
                     "chattr +i was refused (CAP_LINUX_IMMUTABLE in the initial namespace, real root)")
    try:
        with pytest.raises(PermissionError):
            store.download("demo", locked / "dest")
        assert os.listdir(locked) == []
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
        locked.chmod(0o755)
    (fast_tmp / "a-file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        store.download("demo", fast_tmp / "a-file" / "dest")
    assert store_snapshot(store) == before

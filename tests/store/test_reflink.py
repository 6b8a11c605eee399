"""Item 3 of issue 16: on a filesystem that can clone (xfs, btrfs), a download shares the blob's extents
instead of copying its bytes (``copy_file_range`` reflinks within one filesystem there), and the digest of
what landed is still verified: a corrupt blob is refused, shared or not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.engine.content import IN_MEMORY_LIMIT
from artifactkit.errors import IntegrityError
from tests.support.capability import require_loop_devices, require_tool
from tests.support.fiemap import shared_bytes
from tests.support.mounts import Mounts

SIZE = IN_MEMORY_LIMIT + (8 << 20)  # above the in-memory limit: copied by the kernel, in several steps


@pytest.fixture(params=["xfs", "btrfs"])
def cloning_fs(request: pytest.FixtureRequest, mounts: Mounts) -> Iterator[Path]:
    require_loop_devices()
    require_tool(*(("mkfs.xfs", "xfsprogs") if request.param == "xfs" else ("mkfs.btrfs", "btrfs-progs")))
    yield mounts.xfs() if request.param == "xfs" else mounts.btrfs(size_mb=256)


def _large(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(SIZE))
    os.utime(path, ns=(1_000_000_000_123_456_789, 1_100_000_000_987_654_321))
    return path


def test_a_large_download_shares_the_blobs_extents_and_is_exact(cloning_fs: Path) -> None:
    src = cloning_fs / "src"
    _large(src / "model.bin")
    store = Store(cloning_fs / "store")
    ref = store.publish(src, "model")
    store.download(ref, cloning_fs / "out")
    assert (cloning_fs / "out" / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert shared_bytes(cloning_fs / "out" / "model.bin") == SIZE  # every byte a clone of the blob's
    # The control: a file written with write() shares nothing, so the check above can fail.
    (cloning_fs / "written.bin").write_bytes((src / "model.bin").read_bytes())
    assert shared_bytes(cloning_fs / "written.bin") == 0


def test_a_corrupt_blob_is_refused_although_the_download_would_only_clone_it(cloning_fs: Path) -> None:
    src = cloning_fs / "src"
    _large(src / "model.bin")
    store = Store(cloning_fs / "store")
    ref = store.publish(src, "model")
    entry = next(e for e in store.manifest(ref).entries if e.path == "model.bin")
    assert entry.sha256 is not None
    blob = Path(store.layout.blob_path(entry.sha256))
    blob.chmod(0o644)
    with open(blob, "r+b") as handle:  # one byte, in place: the rest of the blob stays as it was
        handle.seek(SIZE // 2)
        flipped = b"\x00" if handle.read(1) != b"\x00" else b"\x01"
        # Back to that byte: read(1) moved on, and writing the next one left the blob intact 1 run in 256
        # (random content: the next byte already held the value), so the download rightly did not raise.
        handle.seek(SIZE // 2)
        handle.write(flipped)
    with pytest.raises(IntegrityError, match="corrupt"):
        store.download(ref, cloning_fs / "out")
    assert not (cloning_fs / "out").exists()

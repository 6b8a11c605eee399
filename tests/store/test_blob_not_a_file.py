"""A name in ``blobs/`` that is no regular file — a FIFO, or a socket, which no ``open`` can read (``ENXIO``) — is
corruption of the store on both engines: a download refuses it with one ``IntegrityError`` (the same message and
path on each) and leaves no destination, and ``verify`` lists it as corrupt rather than stopping. A socket used
to escape both as a bare ``OSError(ENXIO)``."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store, assert_metadata_equal, capture_tree
from artifactkit.conformance.corpus import materialize
from artifactkit.engine import content
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.opened_files import files_opened


def _fifo(blobs_fd: int, name: str) -> None:
    os.mkfifo(name, dir_fd=blobs_fd)


def _socket(blobs_fd: int, name: str) -> None:
    # Bound through the directory's fd: a socket's path may not exceed 107 bytes, a test's scratch path may.
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(f"/proc/self/fd/{blobs_fd}/{name}")
    listener.close()  # the name stays, nothing listens: as a hostile writer would leave it


PLANTED: dict[str, Callable[[int, str], None]] = {"fifo": _fifo, "socket": _socket}


@pytest.mark.parametrize("kind", sorted(PLANTED))
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_blob_that_is_no_file_is_corruption_for_download_and_verify(fast_tmp: Path, engine: str, kind: str) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", "demo")
    sha = next(e.sha256 for e in store.manifest(ref).entries if e.path == "README.txt")
    assert sha is not None
    blobs_fd = os.open(store.layout.blobs_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.unlink(sha, dir_fd=blobs_fd)
        PLANTED[kind](blobs_fd, sha)
    finally:
        os.close(blobs_fd)
    with running_on(engine), pytest.raises(IntegrityError) as info:
        store.download(ref, fast_tmp / "out")
    # The same words and path on each engine (the core's refusal is raised through content.not_regular).
    assert str(info.value) == f"blob {sha} for 'README.txt' is not a regular file, not stored content"
    assert (info.value.path, info.value.failed.value) == ("README.txt", "corrupt")
    assert not (fast_tmp / "out").exists()
    report = store.verify()
    assert not report.ok and any(sha in item for item in report.corrupt), report


def test_without_procfs_a_blob_is_opened_by_name_once_it_is_looked_at(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no procfs is mounted (a chroot), the reference opens a regular blob by name again, requiring the inode
    it looked at (content._reopen); a FIFO is still refused by the look, never opened. The core's fallback is
    the same (native/src/read/blob_check.rs, reopen, and its test without procfs)."""
    monkeypatch.setattr(content, "PROC_FD", str(fast_tmp / "no-procfs"))
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    with running_on("python"):
        ref = store.publish(fast_tmp / "src", "demo")
        store.publish(fast_tmp / "src", "demo")  # every blob checked by content, opened by name
        store.download(ref, fast_tmp / "out")
        assert_metadata_equal(store.manifest(ref).entries, capture_tree(fast_tmp / "out"), stage="download")
        sha = next(e.sha256 for e in store.manifest(ref).entries if e.path == "README.txt")
        assert sha is not None
        os.unlink(store.layout.blob_path(sha))
        os.mkfifo(store.layout.blob_path(sha), 0o444)
        with files_opened(Path(store.layout.blobs_dir)) as opened:
            with pytest.raises(IntegrityError, match="not a regular file"):
                store.download(ref, fast_tmp / "again")
            assert sha not in opened.take()

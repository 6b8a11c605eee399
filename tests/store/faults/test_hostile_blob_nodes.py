"""A FIFO or a device node under a blob's name, planted by a writer of the store, is never opened (issue 48).

Refusing one after its ``open`` (the ``fstat`` of the opened fd) was too late: opening a device runs its driver,
and opening a FIFO wakes a writer waiting on it. Download, verify and publish look at a blob through an
``O_PATH`` fd first and open it for reading only once it is a regular file. "Never opened" is what the kernel
reports: no inotify ``IN_OPEN`` on the node's name, on either engine (this directory's ``engine``).
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store, assert_metadata_equal, capture_tree
from artifactkit.errors import RepairedBlobsWarning
from tests.support.capability import require_real_root
from tests.support.opened_files import files_opened


def _fifo(path: str) -> None:
    os.mkfifo(path, 0o444)


def _null(path: str) -> None:
    require_real_root("make a device node in the store")
    os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(1, 3))  # /dev/null's numbers: opening it succeeds


NODES: dict[str, Callable[[str], None]] = {"fifo": _fifo, "char-device": _null}


@pytest.mark.parametrize("node", sorted(NODES))
def test_a_node_under_a_blob_name_is_refused_and_replaced_without_being_opened(fast_tmp: Path, node: str) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    (src / "victim").write_bytes(b"stored content\n" * 10)
    (src / "other").write_bytes(b"another blob, read by the same download\n")
    store = Store(fast_tmp / "store")
    first = store.publish(src, "demo")
    sha = next(e.sha256 for e in store.manifest(first).entries if e.path == "victim")
    assert sha is not None
    blob = store.layout.blob_path(sha)
    os.unlink(blob)
    NODES[node](blob)
    with files_opened(Path(store.layout.blobs_dir)) as opened:
        with pytest.raises(IntegrityError, match="not a regular file"):
            store.download(first, fast_tmp / "out")
        assert not (fast_tmp / "out").exists()
        report = store.verify()
        assert any(sha in item and "not a regular file" in item for item in report.corrupt), report
        assert report.broken_versions == ["demo@1"], report
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RepairedBlobsWarning)
            second = store.publish(src, "demo")  # stores its own bytes over the node
        assert [vars(w.message)["blobs"] for w in caught if issubclass(w.category, RepairedBlobsWarning)] == [[sha]]
        assert sha not in opened.take(), f"the {node} under the blob's name was opened"
    assert stat.S_ISREG(os.lstat(blob).st_mode)
    store.download(second, fast_tmp / "second")
    assert_metadata_equal(store.manifest(second).entries, capture_tree(fast_tmp / "second"), stage="download")
    assert store.verify().ok


"""The stat cache on a bucket store (issue 24): the same planner as a local store's, its file in the user's
cache directory (a bucket has no directory to keep it in), the same answers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store, assert_metadata_equal
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.store import stat_cache
from artifactkit.store.s3.backend import stat_cache_dir
from tests.support.opened_files import OpenedFiles


def _tree(root: Path) -> Path:
    (root / "d").mkdir(parents=True)
    for index in range(12):
        (root / "d" / f"f{index}").write_bytes(f"content {index}\n".encode() * (index + 1))
    os.symlink("d/f0", root / "link")
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[OpenedFiles]:
    """The source files a publish opened, as the kernel saw them; caches under ``tmp_path``."""
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)  # the tree was just written: trust it at once
    opened = OpenedFiles()
    yield opened
    opened.close()


def test_an_unchanged_tree_republished_to_a_bucket_reads_nothing_and_commits_the_same_manifest(
        s3_url: str, fast_tmp: Path, reads: OpenedFiles) -> None:
    src = _tree(fast_tmp / "src")
    reads.watch(src)
    store = Store(s3_url)
    first = store.publish(src, "demo", stat_cache=True)
    assert len(reads.take()) == 12
    store.publish(src, "demo", stat_cache=True)  # records the link's atime its first readlink moved
    reads.take()
    again = store.publish(src, "demo", stat_cache=True)
    assert reads.take() == [], "an unchanged tree was read again"
    assert again.version == 3 and again.digest == store.publish(src, "demo").digest  # what a full read writes
    assert first.name == again.name
    store.download(again, fast_tmp / "out")
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "out"), stage="download")
    assert os.listdir(stat_cache_dir(store.bucket.url())) == ["stat-cache.json"]


def test_the_cache_of_one_bucket_store_is_not_another_ones(s3_url: str, fast_tmp: Path, reads: OpenedFiles) -> None:
    src = _tree(fast_tmp / "src")
    reads.watch(src)
    Store(s3_url).publish(src, "demo", stat_cache=True)
    other = s3_url.rstrip("/") + "-other"
    reads.take()
    Store(other).publish(src, "demo", stat_cache=True)
    assert len(reads.take()) == 12, "a cache recorded for another store vouched for files its bucket never got"

"""The manifest limit holds each tree object, not a version's whole listing (format 3): a tree whose listing is
far past the limit publishes and downloads with it, while one object past it is refused at publish, naming the
directory and the setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import ManifestLimitError, Store
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.manifest.limits import MANIFEST_BYTES_SETTING, TREE_BYTES_SETTING
from artifactkit.metadata.compare import compare
from tests.support.engines import ENGINE_NAMES, running_on

LIMIT = 64 << 10


def _tree(root: Path, dirs: int, files: int) -> Path:
    for d in range(dirs):
        (root / f"d{d:03}").mkdir(parents=True)
        for f in range(files):
            (root / f"d{d:03}" / f"f{f:03}").write_bytes(f"{d}/{f}\n".encode())
    return root


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_listing_past_the_limit_publishes_and_downloads_when_each_object_is_within_it(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    src = _tree(fast_tmp / "src", 40, 20)  # 841 entries, about 200 KiB of listing; 20 lines per directory
    store = Store(fast_tmp / "store")
    monkeypatch.setenv(MANIFEST_BYTES_SETTING, str(LIMIT))
    with running_on(engine):
        ref = store.publish(src, "big")
        assert len(store.manifest(ref).to_bytes()) > 3 * LIMIT
        store.download(ref, fast_tmp / "out")
    assert compare(capture_tree(src), capture_tree(fast_tmp / "out")) == []
    blobs = fast_tmp / "store" / "blobs"
    assert max(os.path.getsize(blobs / name) for name in os.listdir(blobs)) <= LIMIT


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_one_directory_object_past_the_limit_is_refused_at_publish_naming_it(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    src = _tree(fast_tmp / "src", 1, 250)  # one directory of 250 entries: one object of about 60 KiB
    store = Store(fast_tmp / "store")
    monkeypatch.setenv(MANIFEST_BYTES_SETTING, str(16 << 10))
    with running_on(engine), pytest.raises(ManifestLimitError, match=r"tree object of 'd000' would have") as caught:
        store.publish(src, "big")
    assert caught.value.setting == MANIFEST_BYTES_SETTING  # type: ignore[attr-defined]
    assert store.list() == [] and os.listdir(fast_tmp / "store" / "staging") == []


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_version_whose_tree_objects_hold_more_than_the_tree_limit_is_refused_before_anything_is_written(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    # What a hostile writer's version can cost a reader: each object is held to the manifest limit, the whole walk
    # to the tree limit (a store of a million small objects would otherwise be read into memory whole).
    src = _tree(fast_tmp / "src", 10, 20)
    store = Store(fast_tmp / "store")
    ref = store.publish(src, "tree")
    monkeypatch.setenv(TREE_BYTES_SETTING, str(8 << 10))
    with running_on(engine), pytest.raises(ManifestLimitError, match="tree objects hold more than") as caught:
        store.download(ref, fast_tmp / "out")
    assert caught.value.setting == TREE_BYTES_SETTING  # type: ignore[attr-defined]
    assert sorted(os.listdir(fast_tmp)) == ["src", "store"]
    monkeypatch.delenv(TREE_BYTES_SETTING)
    store.download(ref, fast_tmp / "out")


@pytest.mark.parametrize("setting", ["0", "512M", "1e6"])
def test_a_manifest_limit_that_is_no_limit_is_refused_before_a_publish_reads_anything(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    src = _tree(fast_tmp / "src", 1, 3)
    files = [path for path in src.rglob("*") if path.is_file()]  # listing a directory moves its atime itself
    before = {path: os.stat(path).st_atime_ns for path in files}
    monkeypatch.setenv(MANIFEST_BYTES_SETTING, setting)
    with pytest.raises(ManifestLimitError, match=MANIFEST_BYTES_SETTING):
        Store(fast_tmp / "store").publish(src, "tree")
    monkeypatch.delenv(MANIFEST_BYTES_SETTING)
    assert not (fast_tmp / "store").exists() or Store(fast_tmp / "store").list() == []
    assert {path: os.stat(path).st_atime_ns for path in files} == before  # no file was read

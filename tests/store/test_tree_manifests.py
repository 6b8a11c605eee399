"""Manifest format 3 as published (issue 52): a version is one line naming its root's tree object, and each
directory is an object a person can ``sha256sum`` and read; unchanged directories are shared between versions,
a large directory is split by name, both engines write the same bytes, and gc and verify know objects as blobs.
Everything inside the store is looked at through the transparent layout (:mod:`tests.support.tree_objects`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from artifactkit import ArtifactRef, Store, assert_metadata_equal, capture_tree
from artifactkit.manifest.tree_format import PART_MAX_ENTRIES
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.hostile_store import blob_bytes, forge_manifest, manifest_doc, remove_blob, replace_blob
from tests.support.stores import raw_manifest, store_snapshot, stored_names
from tests.support.tree_objects import (
    TREE_FORMAT,
    canonical_entries,
    canonical_index,
    directory_objects,
    every_object,
    object_doc,
    parts_of,
    root_doc,
)


def _tree(src: Path) -> Path:
    for path, data in {"a/b/c/f": b"deep\n", "a/b/g": b"g\n", "a/h": b"h\n", "x/y": b"y\n", "x/z/w": b"w\n",
                       "top": b"top\n"}.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(data)
    (src / "empty").mkdir()
    return src


def _blobs(store: Store) -> dict[str, int]:
    """Every name in the store's blob directory with its size."""
    return {name: len(blob_bytes(store, name)) for name in stored_names(store, "blobs")}


def _blob_files(store: Store) -> dict[str, tuple[object, ...]]:
    """What the store holds under ``blobs/``, with each file's inode and mtime or each object's ETag and time."""
    return {key: value for key, value in store_snapshot(store, times=True).items() if "blobs/" in key}


def test_a_version_is_one_line_naming_its_root_object_and_each_object_is_canonical_json_named_by_its_sha256(
        any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    ref = any_store.publish(src, "demo")
    body = raw_manifest(any_store, ref)
    assert body.endswith(b"\n") and body.count(b"\n") == 1 and hashlib.sha256(body).hexdigest() == ref.digest
    root = json.loads(body)
    captured = capture_tree(src)
    files = [e for e in captured if e.kind == "file"]
    assert (root["format"], root["name"], root["root"]["path"]) == ("artifactkit.manifest/3", "demo", ".")
    assert (root["entries"], root["files"], root["bytes"]) == (len(captured), len(files), sum(e.size for e in files))
    assert body == (json.dumps(root, sort_keys=True, separators=(", ", ": ")) + "\n").encode()
    objects = directory_objects(any_store, ref)
    assert sorted(objects) == sorted(e.path for e in captured if e.kind == "dir")
    listed = []
    for path, digest in objects.items():
        data = blob_bytes(any_store, digest)
        assert hashlib.sha256(data).hexdigest() == digest  # what `sha256sum blobs/*` shows a person
        doc = json.loads(data)
        assert (doc["format"], doc["path"]) == (TREE_FORMAT, path)
        assert data == canonical_entries(path, doc["entries"], [tuple(pair) for pair in doc["trees"]])
        assert [p for p, _ in doc["trees"]] == [e["path"] for e in doc["entries"] if e["kind"] == "dir"]
        assert all(e["path"].rpartition("/")[0] == ("" if path == "." else path) for e in doc["entries"])
        listed += doc["entries"]
    # Every entry but the root's is in its parent's object: the objects are the whole manifest, each once.
    assert sorted(e["path"] for e in listed) == sorted(e.path for e in captured if e.path != ".")
    any_store.download(ref, fast_tmp / "out")
    assert_metadata_equal(captured, capture_tree(fast_tmp / "out"), stage="download")


def test_an_unchanged_tree_published_again_writes_no_object(any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    before = _blob_files(any_store)
    second = any_store.publish(src, "demo")
    assert _blob_files(any_store) == before  # not one name, inode, size or time of writing changed
    assert root_doc(any_store, second)["tree"] == root_doc(any_store, first)["tree"]


def test_one_change_in_a_deep_directory_writes_only_its_object_and_its_ancestors(
        any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    before = _blobs(any_store)
    (src / "a/b/c/f").write_bytes(b"changed\n")
    second = any_store.publish(src, "demo")
    new = {name: size for name, size in _blobs(any_store).items() if name not in before}
    old_objects, new_objects = directory_objects(any_store, first), directory_objects(any_store, second)
    rewritten = ["a/b/c", "a/b", "a", "."]
    content = hashlib.sha256(b"changed\n").hexdigest()
    assert sorted(new) == sorted([content, *(new_objects[path] for path in rewritten)])
    assert sum(new.values()) == len(b"changed\n") + sum(len(blob_bytes(any_store, new_objects[p])) for p in rewritten)
    assert sum(new.values()) < 4096  # a few lines per directory on the way, nothing of the rest
    assert {p: d for p, d in new_objects.items() if p not in rewritten} == {
        p: d for p, d in old_objects.items() if p not in rewritten}
    assert all(new_objects[p] != old_objects[p] for p in rewritten)


def test_a_directory_of_3000_entries_is_split_into_parts_and_one_change_rewrites_one_part_and_its_index(
        fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    (src / "big").mkdir(parents=True)
    names = [f"big/{i:05d}" for i in range(3000)]
    for name in names:
        (src / name).write_bytes(b"")
    store = Store(fast_tmp / "store")
    first = store.publish(src, "demo")
    index = directory_objects(store, first)["big"]
    index_bytes = blob_bytes(store, index)
    parts = parts_of(store, index)
    assert len(parts) >= 2 and index_bytes == canonical_index("big", parts)
    assert set(json.loads(index_bytes)) == {"format", "parts", "path"}
    held = []
    for part in parts:
        doc = object_doc(store, part)
        assert doc["path"] == "big" and doc["trees"] == [] and 0 < len(doc["entries"]) <= PART_MAX_ENTRIES
        assert blob_bytes(store, part) == canonical_entries("big", doc["entries"], [])
        held.append([e["path"] for e in doc["entries"]])
    assert [path for part in held for path in part] == names  # in name order, each once
    changed = names[1234]
    before = _blobs(store)
    (src / changed).write_bytes(b"one change\n")
    second = store.publish(src, "demo")
    new = set(_blobs(store)) - set(before)
    new_parts = parts_of(store, directory_objects(store, second)["big"])
    assert len(new_parts) == len(parts)
    replaced = [at for at, (old, now) in enumerate(zip(parts, new_parts, strict=True)) if old != now]
    assert len(replaced) == 1 and changed in held[replaced[0]]
    assert new == {hashlib.sha256(b"one change\n").hexdigest(), new_parts[replaced[0]],
                   directory_objects(store, second)["big"], root_doc(store, second)["tree"]}


@pytest.mark.parametrize("form", ["artifactkit.manifest/1", "artifactkit.manifest/2"])
def test_versions_of_formats_1_and_2_still_download_whole_in_part_and_diff(
        any_store: Store, fast_tmp: Path, form: str) -> None:
    src = _tree(fast_tmp / "src")
    published = any_store.publish(src, "demo")
    doc = manifest_doc(any_store, published)
    doc["format"] = form
    if form.endswith("/1"):  # format 1 recorded no owners, xattrs or flags
        for entry in doc["entries"]:
            for key in ("uid", "gid", "xattrs", "flags"):
                entry.pop(key, None)
    old = ArtifactRef("demo", 2, forge_manifest(any_store, "demo", 2, json.dumps(doc).encode()))
    assert any_store.download(old, fast_tmp / "whole") == old
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "whole"), stage="download",
                          fields=("kind", "mode", "size", "sha256", "mtime_ns", "atime_ns"))
    any_store.download(old, fast_tmp / "part", paths=["a/b"])
    assert sorted(str(p.relative_to(fast_tmp / "part")) for p in (fast_tmp / "part").rglob("*")) == [
        "a", "a/b", "a/b/c", "a/b/c/f", "a/b/g"]
    assert any_store.diff(published, old) == []  # a field format 1 did not record is not a difference


def _every_kind(src: Path) -> Path:
    """A tree with each kind of entry the store keeps: dirs, files, symlinks, hard links across directories,
    xattrs, a FIFO, a sparse file, and a directory large enough to be split."""
    for path, data in {"d/e/f": b"file\n", "d/linked": b"one inode, three names\n", "other/x": b"x\n"}.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(data)
    os.link(src / "d/linked", src / "other/second")
    os.link(src / "d/linked", src / "d/e/third")
    os.symlink("../d/e/f", src / "other/link")
    os.setxattr(src / "d/e/f", "user.note", b"\x00kept\xff")
    os.mkfifo(src / "d/pipe", 0o640)
    with open(src / "sparse", "wb") as handle:
        handle.seek(1 << 20)
        handle.write(b"tail")
        handle.truncate(3 << 20)
    (src / "many").mkdir()
    for i in range(1100):
        (src / "many" / f"n{i}").write_bytes(b"")
    os.utime(src / "d/e/f", ns=(1_000_000_000_123_456_789, 900_000_000_987_654_321))
    return src


def test_both_engines_write_byte_identical_objects_and_root_for_the_same_tree(noatime_tree: Path,
                                                                              fast_tmp: Path) -> None:
    # On a noatime mount: reading a link's target (no O_NOATIME for readlink) would move its atime between the two.
    src = _every_kind(noatime_tree / "src")
    stored: dict[str, tuple[bytes, dict[str, bytes]]] = {}
    for engine in ENGINE_NAMES:
        with running_on(engine):
            store = Store(fast_tmp / f"store-{engine}")
            ref = store.publish(src, "demo")
            objects = every_object(store, ref)
            stored[engine] = (raw_manifest(store, ref), {d: blob_bytes(store, d) for d in objects})
            assert len(parts_of(store, directory_objects(store, ref)["many"])) >= 2
    assert stored["python"][0] == stored["native"][0]
    assert stored["python"][1] == stored["native"][1]
    assert sorted(os.listdir(fast_tmp / "store-python/blobs")) == sorted(os.listdir(fast_tmp / "store-native/blobs"))


def test_gc_keeps_the_objects_of_live_versions_and_removes_those_only_a_forgotten_version_used(
        any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src")
    first = any_store.publish(src, "demo")
    (src / "x/z/w").write_bytes(b"w, changed\n")
    second = any_store.publish(src, "demo")
    only_first = set(every_object(any_store, first)) - set(every_object(any_store, second))
    assert len(only_first) == 3  # x/z's, x's and the root's
    any_store.forget("demo", [1])
    report = any_store.gc(grace_s=0)
    assert sorted(report.removed_blobs) == sorted([*only_first, hashlib.sha256(b"w\n").hexdigest()])
    assert set(every_object(any_store, second)) <= set(stored_names(any_store, "blobs"))
    verified = any_store.verify()
    assert verified.clean, verified
    any_store.download(second, fast_tmp / "out")
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "out"), stage="download")


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_verify_reports_a_missing_or_corrupt_object_and_names_every_version_it_breaks(
        any_store: Store, fast_tmp: Path, damage: str) -> None:
    src = _tree(fast_tmp / "src")
    any_store.publish(src, "demo")
    (src / "top").write_bytes(b"top, changed\n")
    second = any_store.publish(src, "demo")
    any_store.publish(src / "x", "other")  # no object in common with demo's: every path in it differs
    shared = directory_objects(any_store, second)["a/b"]
    if damage == "missing":
        remove_blob(any_store, shared)
    else:
        replace_blob(any_store, shared, blob_bytes(any_store, shared) + b" ")
    report = any_store.verify()
    assert not report.ok
    named = [item for item in report.missing + report.unreadable + report.corrupt if shared in item]
    assert len(named) == 2 and any("demo@1" in i for i in named) and any("demo@2" in i for i in named), report
    if damage == "corrupt":
        assert sorted(named) == sorted(item for item in report.corrupt if shared in item)
    assert report.broken_versions == ["demo@1", "demo@2"]

"""``Store.forget``: versions leave the list one atomic removal each, never one a download holds, never a
number a later publish could take again; ``gc`` then frees what only they used."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from artifactkit import ArtifactRef, Store, assert_metadata_equal
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import VersionInUseError
from artifactkit.store.progress import Progress
from tests.support.stores import is_bucket, store_snapshot, stored_names, tree_object_names


def _tree(root: Path, tag: str, *, big: int = 0) -> Path:
    """A small tree whose every file is new content (``tag``); ``big`` bytes more in a file of its own."""
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    for i in range(3):
        (root / "sub" / f"f{i}").write_bytes(f"{tag} file {i}\n".encode())
    if big:
        (root / "big.bin").write_bytes(os.urandom(big))
    os.utime(root / "sub", ns=(1_500_000_000_123_456_789, 1_400_000_000_987_654_321))
    return root


def _versions(store: Store, name: str = "demo") -> list[int]:
    return [ref.version for ref in store.list() if ref.name == name]


def _downloads_exactly(store: Store, ref: ArtifactRef, src: Path, dest: Path) -> None:
    store.download(ref, dest)
    assert_metadata_equal(store.manifest(ref).entries, capture_tree(dest), stage="download")
    for path in src.rglob("*"):
        if path.is_file():
            assert (dest / path.relative_to(src)).read_bytes() == path.read_bytes()


def test_forget_then_gc_frees_what_only_the_forgotten_version_used_and_the_newest_still_downloads_exactly(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    old = store.publish(_tree(fast_tmp / "v1", "shared", big=256 << 10), "demo")
    src = _tree(fast_tmp / "v2", "shared")  # the same three small files: their blobs stay needed
    new = store.publish(src, "demo")
    big = hashlib.sha256((fast_tmp / "v1" / "big.bin").read_bytes()).hexdigest()

    assert store.forget("demo", versions=[1]) == [old]
    assert store.list() == [new]
    objects = set(tree_object_names(store))
    report = store.gc(grace_s=0)  # the bucket's default grace would keep an hour-young blob
    # The big file's content, and tree objects only the forgotten version had (its root's, at least).
    assert [sha for sha in report.removed_blobs if sha not in objects] == [big]
    assert len(report.removed_blobs) > 1
    assert report.freed_bytes >= 256 << 10
    assert big not in stored_names(store, "blobs")
    _downloads_exactly(store, new, src, fast_tmp / "out")
    assert store.verify().clean


def test_keep_last_forgets_all_but_the_newest_n_and_never_takes_the_last_one(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    refs = [store.publish(_tree(fast_tmp / f"v{i}", f"v{i}"), "demo") for i in range(1, 5)]
    other = store.publish(fast_tmp / "v1", "other")
    assert store.forget("demo", keep_last=2) == refs[:2]
    assert _versions(store) == [3, 4] and _versions(store, "other") == [other.version]
    assert store.forget("demo", keep_last=2) == []  # nothing more to forget is no error
    before = store_snapshot(store)
    for bad in ({"keep_last": 0}, {"keep_last": -1}, {}, {"versions": [3], "keep_last": 1}, {"versions": []}):
        with pytest.raises(ValueError, match=r"keep_last|versions"):
            store.forget("demo", **bad)  # type: ignore[arg-type]
    assert store_snapshot(store) == before


def test_dry_run_names_what_would_go_and_changes_nothing(fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    refs = [store.publish(_tree(fast_tmp / f"v{i}", f"v{i}"), "demo") for i in range(1, 4)]
    before = store_snapshot(store, times=True)
    assert store.forget("demo", keep_last=1, dry_run=True) == refs[:2]
    assert store.forget("demo", versions=[3], dry_run=True) == refs[2:]
    assert store_snapshot(store, times=True) == before


def test_a_missing_name_or_version_is_a_lookup_error_and_nothing_is_removed(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    store.publish(_tree(fast_tmp / "v1", "v1"), "demo")
    before = store_snapshot(store)
    with pytest.raises(LookupError, match="no version 9"):
        store.forget("demo", versions=[1, 9])
    with pytest.raises(LookupError, match="no artifact named 'nope'"):
        store.forget("nope", keep_last=1)
    assert store_snapshot(store) == before


def test_a_forgotten_newest_version_number_is_never_given_to_a_later_publish(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    for i in range(1, 4):
        store.publish(_tree(fast_tmp / f"v{i}", f"v{i}"), "demo")
    store.forget("demo", versions=[2, 3])
    src = _tree(fast_tmp / "v4", "v4")
    ref = store.publish(src, "demo")
    # "demo@3" meant one tree; a publish after its forget must not make it mean another.
    assert ref.version == 4 and _versions(store) == [1, 4]
    store.forget("demo", versions=[1, 4])
    assert store.list() == []
    assert store.publish(src, "demo").version == 5
    _downloads_exactly(store, ArtifactRef("demo", 5, ref.digest), src, fast_tmp / "out")


def test_a_publish_running_while_its_newest_version_is_forgotten_gets_a_distinct_version_that_downloads(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    for i in range(1, 4):
        store.publish(_tree(fast_tmp / f"v{i}", f"v{i}"), "demo")
    forgotten: list[list[ArtifactRef]] = []
    errors: list[BaseException] = []

    def forget() -> None:
        try:
            forgotten.append(Store(store.root).forget("demo", versions=[3]))
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)
    worker = threading.Thread(target=forget)

    def midway(progress: Progress) -> None:
        if progress.phase == "read" and not worker.is_alive() and not forgotten and not errors:
            worker.start()
            if not is_bucket(store):
                # A local forget takes only the name's lock, which this publish takes at its claim: it ends
                # first, so the claim below sees the number it freed. A bucket's forget waits for this
                # publish's lease instead (its claim comes first): both orders are checked, one per store.
                worker.join()
    src = _tree(fast_tmp / "racing", "racing")
    ref = store.publish(src, "demo", progress=midway)
    worker.join()
    assert errors == [] and [r.version for r in forgotten[0]] == [3]
    assert ref.version == 4 and _versions(store) == [1, 2, 4]
    _downloads_exactly(store, ref, src, fast_tmp / "out")


def test_forget_refuses_a_version_a_running_download_holds_and_removes_nothing(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    held = store.publish(_tree(fast_tmp / "v1", "v1", big=64 << 10), "demo")
    store.publish(_tree(fast_tmp / "v2", "v2"), "demo")
    refused: list[BaseException] = []
    swept: list[int] = []

    def midway(progress: Progress) -> None:
        if refused:
            return
        other = Store(store.root)  # another client of the same store, as another process would be
        before = store_snapshot(other)
        for attempt in ({"versions": [1]}, {"keep_last": 1}):
            try:
                other.forget("demo", **attempt)  # type: ignore[arg-type]
            except VersionInUseError as err:
                refused.append(err)
        assert store_snapshot(other) == before
        swept.append(len(other.gc(grace_s=0).removed_blobs))  # the held version's blobs are needed still

    assert store.download(held, fast_tmp / "out", progress=midway) == held
    assert_metadata_equal(store.manifest(held).entries, capture_tree(fast_tmp / "out"), stage="download")
    assert (fast_tmp / "out" / "big.bin").read_bytes() == (fast_tmp / "v1" / "big.bin").read_bytes()
    assert len(refused) == 2 and swept == [0]
    assert "demo@1" in str(refused[0]) and getattr(refused[0], "versions", None) == ["demo@1"]
    # Once the download is over, nothing holds it.
    assert store.forget("demo", versions=[1]) == [held]
    assert store.gc(grace_s=0).freed_bytes >= 64 << 10


def test_without_the_download_hold_the_same_forget_and_gc_pull_the_blobs_from_under_the_download(
        fast_tmp: Path, any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hold's own control: a download that holds nothing loses its version and its blobs mid-way.
    from contextlib import nullcontext

    from artifactkit.errors import IntegrityError
    from artifactkit.store.local_backend import LocalStore
    from artifactkit.store.s3.backend import BucketStore

    for opened in (LocalStore, BucketStore):
        monkeypatch.setattr(opened, "holding", lambda self, name, version: nullcontext())
    store = any_store
    held = store.publish(_tree(fast_tmp / "v1", "v1", big=64 << 10), "demo")
    store.publish(_tree(fast_tmp / "v2", "v2"), "demo")
    swept: list[int] = []

    def midway(progress: Progress) -> None:
        if progress.phase == "fetch" and not swept:
            other = Store(store.root)
            other.forget("demo", versions=[1])
            swept.append(len(other.gc(grace_s=0).removed_blobs))
    with pytest.raises((IntegrityError, FileNotFoundError)):
        store.download(held, fast_tmp / "out", progress=midway)
    assert swept and swept[0] >= 1 and not (fast_tmp / "out").exists()

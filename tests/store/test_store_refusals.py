"""Bad input gets its named error and loses nothing: forged manifests, planted links, corrupt blobs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import artifactkit.engine.reference.create as restore_module
from artifactkit import IntegrityError, Store, UnsafePathError
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import IntegrityFailure
from artifactkit.manifest import artifact_ref
from artifactkit.manifest.encode import digest_of
from artifactkit.store.s3 import layout as s3_layout
from artifactkit.store.s3.leases import LeasePolicy
from tests.support.crash import snapshot
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.hostile_store import blob_bytes, forge_manifest, put_blob, remove_blob
from tests.support.leftovers import killed_private_dir
from tests.support.stores import is_bucket, listing_doc, plant_staging, raw_manifest


@pytest.fixture
def published(fast_tmp: Path, any_store: Store) -> tuple[Store, Path]:
    materialize("basic", fast_tmp / "src")
    store = any_store
    store.publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    return store, fast_tmp


def forge(store: Store, edit: object, *, rename: bool = True) -> None:
    """Replace the only manifest by a format-2 one of the same entries, edited; with ``rename`` also re-name it by its
    new digest (a careful attacker). Format 2 is still read: a writer of the store can always write one (format 3's
    objects have their own forgeries: tests/store/faults/test_hostile_trees.py)."""
    ref = store.list()[-1]
    doc = listing_doc(store, ref)
    edit(doc)  # type: ignore[operator]
    # Named (a local file name, a bucket's pin) by the new body's digest, or still by the old one.
    forge_manifest(store, ref.name, ref.version, json.dumps(doc).encode(), digest=None if rename else ref.digest)


def outside_untouched(tmp: Path, before: dict[str, tuple[object, ...]]) -> None:
    after = snapshot(tmp, times=True)
    assert {p for p in after if not p.startswith("work")} == {p for p in before if not p.startswith("work")}
    assert os.listdir(tmp / "work") == [], "no partial destination and no staging left behind"


@pytest.mark.parametrize("bad_path", ["../x", "/etc/x", "data/../../x", "a//b", "x\x00y"])
def test_a_forged_manifest_path_is_refused_before_anything_is_written(
        published: tuple[Store, Path], bad_path: str) -> None:
    store, tmp = published
    forge(store, lambda doc: doc["entries"][1].update(path=bad_path))
    before = snapshot(tmp, times=True)
    with pytest.raises(UnsafePathError):
        store.download("demo", tmp / "work" / "dest")
    outside_untouched(tmp, before)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_manifest_edited_in_place_fails_its_digest(published: tuple[Store, Path], engine: str) -> None:
    store, tmp = published
    ref = store.list()[-1]
    forge(store, lambda doc: doc["entries"][1].update(path="../x"), rename=False)
    with running_on(engine), pytest.raises(IntegrityError, match="is corrupt: its bytes hash to") as caught:
        store.download("demo", tmp / "work" / "dest")
    assert (caught.value.failed, caught.value.expected) == (IntegrityFailure.CORRUPT, ref.digest)
    assert caught.value.actual == hashlib.sha256(raw_manifest(store, ref)).hexdigest()
    assert os.listdir(tmp / "work") == []


@pytest.mark.parametrize(("engine", "hashed_in_python"), [("python", 2), ("native", 1)])
def test_a_download_hashes_its_manifest_once(published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch,
                                             engine: str, hashed_in_python: int) -> None:
    """The backend's read leaves the digest to what follows: a format-3 manifest (one line) is hashed as it is read,
    and the listing its tree objects make is checked by the parse (the test above): on the native engine the core
    hashes it on a thread of its own while it parses, so Python hashes only the manifest's line.
    A bucket hashes them once more, first: a manifest object is named by its version, and its hash is the ref's
    digest (checked against its pin)."""
    store, tmp = published
    hashed_in_python += is_bucket(store)
    hashed: list[int] = []

    def counted(body: bytes) -> str:
        hashed.append(len(body))
        return digest_of(body)

    for module in (artifact_ref, s3_layout):  # where a manifest's digest is checked: against the ref, a bucket's
        monkeypatch.setattr(module, "digest_of", counted)
    with running_on(engine):
        store.download("demo", tmp / "work" / "dest")
    assert len(hashed) == hashed_in_python


def test_a_symlink_planted_in_the_staging_directory_mid_download_is_refused(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, tmp = published
    outside = tmp / "outside"
    outside.mkdir()
    real_create = restore_module._create

    def create_then_plant(entry: object, dir_fd: int, blob_path: object) -> None:
        real_create(entry, dir_fd, blob_path)  # type: ignore[arg-type]
        if getattr(entry, "path", "") == "data":
            # An attacker swaps the fresh 'data' dir for a link to elsewhere before its children land.
            os.rename("data", "data-moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.symlink(str(outside), "data", dir_fd=dir_fd)

    monkeypatch.setattr(restore_module, "_create", create_then_plant)
    before = snapshot(tmp, times=True)
    with pytest.raises(UnsafePathError, match="replaced by a symlink"):
        store.download("demo", tmp / "work" / "dest")
    assert os.listdir(outside) == []
    outside_untouched(tmp, before)


def test_a_flipped_byte_in_a_blob_fails_download_and_verify_names_the_blob(published: tuple[Store, Path]) -> None:
    store, tmp = published
    manifest = store.manifest("demo")
    victim = next(e for e in manifest.entries if e.path == "bin/tool")
    assert victim.sha256 is not None
    data = bytearray(blob_bytes(store, victim.sha256))
    data[100] ^= 0x01
    put_blob(store, victim.sha256, bytes(data))
    before = snapshot(tmp, times=True)
    with pytest.raises(IntegrityError, match=victim.sha256):
        store.download("demo", tmp / "work" / "dest")
    outside_untouched(tmp, before)
    report = store.verify()
    assert not report.ok
    assert len(report.corrupt) == 1 and victim.sha256 in report.corrupt[0]


def test_a_missing_blob_fails_download_and_verify_lists_it(published: tuple[Store, Path]) -> None:
    store, tmp = published
    victim = next(e for e in store.manifest("demo").entries if e.path == "README.txt")
    assert victim.sha256 is not None
    remove_blob(store, victim.sha256)
    with pytest.raises(IntegrityError, match="missing"):
        store.download("demo", tmp / "work" / "dest")
    assert os.listdir(tmp / "work") == []
    assert [victim.sha256 in item for item in store.verify().missing] == [True]


def test_gc_removes_only_what_no_version_needs(published: tuple[Store, Path]) -> None:
    store, tmp = published
    put_blob(store, "f" * 64, b"orphan")
    plant_staging(store, "publish-crashed")
    # A bucket's gc spares what is younger than its grace period by the server's clock (docs/s3.md), and its
    # verify calls that kept, not orphaned: a grace below 0 spares nothing just written.
    collector = Store(store.root, policy=LeasePolicy(grace_s=-1)) if is_bucket(store) else store
    report = collector.verify()
    assert report.ok and not report.clean and len(report.orphaned) == 2
    gc = collector.gc()
    assert gc.removed_blobs == ["f" * 64] and gc.removed_staging == ["publish-crashed"]
    assert store.verify().clean
    store.download("demo", tmp / "work" / "dest")


def test_a_killed_downloads_staging_is_swept_by_the_next_download_to_that_name(
        published: tuple[Store, Path]) -> None:
    import fcntl

    store, tmp = published
    work = tmp / "work"
    prefix = ".dest.artifactkit-"
    live = killed_private_dir(work, prefix, 12)
    holder = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # as a download in flight holds it
        abandoned = killed_private_dir(work, prefix, 12)  # with its marker: what a killed download leaves
        other = killed_private_dir(work, ".other.artifactkit-", 12)  # another destination's: not this download's
        # A directory under the exact pattern that no download made (anyone who can rename entries in the parent can
        # give any directory that name): a name proves nothing, so it stays, contents and all.
        planted = work / f"{prefix}deadbeef0000"
        (planted / "half").mkdir(parents=True)
        (planted / "half" / "file").write_bytes(b"partial")
        not_ours = [f"{prefix}DEADBEEF0000", f"{prefix}deadbeef00000", f"{prefix}deadbeef000",
                    f"{prefix}dead.beef000"]  # not 12 lowercase hex digits: never made by a download
        for name in not_ours:
            (work / name).mkdir()
        store.download("demo", work / "dest")
    finally:
        os.close(holder)
    assert not abandoned.exists() and (planted / "half" / "file").read_bytes() == b"partial"
    assert sorted(os.listdir(work)) == sorted([live.name, other.name, planted.name, "dest", *not_ours])

"""Edges found in review: lock names, large blobs, every mismatch reported, blobs that are links."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from artifactkit import IntegrityError, MetadataMismatchError, NotAStoreError, Store, assert_metadata_equal
from artifactkit.conformance.corpus import materialize, parse_tree
from artifactkit.engine.reference.create import verify_entries
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata.model import FileMeta
from tests.support.hostile_store import blob_bytes, put_blob
from tests.support.read_race import changed_at_read

BIG = (8 << 20) + 4099  # above the in-memory limit: the kernel-copy path


def big_tree() -> object:
    times = {"mtime_ns": 1_600_000_000_123_456_789, "atime_ns": 1_600_000_001_987_654_321}
    return parse_tree("big", {"entry": [{"path": ".", "kind": "dir", "mode": 0o755, **times},
                                        {"path": "big.bin", "kind": "file", "mode": 0o640, "size": BIG, "seed": 7,
                                         **times}]})


@pytest.mark.parametrize("name", ["store", "turnstile", "names"])
def test_an_artifact_may_be_named_like_the_stores_own_lock_files(fast_tmp: Path, name: str) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(store.publish(fast_tmp / "src", name)), daemon=True)
    worker.start()
    worker.join(timeout=30)  # a self-deadlock never returns: the bound turns it into a failure
    assert done and store.resolve(name).version == 1
    store.gc()


def test_a_large_file_round_trips_exactly_and_its_blob_matches_its_name(fast_tmp: Path, any_store: Store) -> None:
    supplied = materialize(big_tree(), fast_tmp / "src")  # type: ignore[arg-type]
    store = any_store
    ref = store.publish(fast_tmp / "src", "big")
    assert store.verify().clean
    store.download(ref, fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")


def test_a_large_download_to_another_filesystem_falls_back_to_sendfile_and_stays_exact(
        fast_tmp: Path, ext4_relatime_dir: Path) -> None:
    supplied = materialize(big_tree(), fast_tmp / "src")  # type: ignore[arg-type]
    store = Store(fast_tmp / "store")  # tmpfs -> ext4: copy_file_range says EXDEV
    store.download(store.publish(fast_tmp / "src", "big"), ext4_relatime_dir / "out")
    assert_metadata_equal(supplied, capture_tree(ext4_relatime_dir / "out"), stage="download")


@pytest.mark.usefixtures("reference_engine")
def test_a_copy_that_fails_over_midway_to_sendfile_still_copies_every_byte(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No filesystem refuses copy_file_range halfway on demand, so the refusal is the reference's patched
    # os.copy_file_range. The native core's copy loop has the same test in Rust (native/src/read/copy.rs:
    # a_copy_refused_midway_goes_on_with_sendfile_from_where_it_stopped); a real EXDEV from the first call
    # is the test above, on either engine.
    supplied = materialize(big_tree(), fast_tmp / "src")  # type: ignore[arg-type]
    real = os.copy_file_range
    calls: list[int] = []

    def partial_then_exdev(src: int, dst: int, count: int, offset_src: int, offset_dst: int) -> int:
        calls.append(count)
        if len(calls) == 1:
            return real(src, dst, min(count, 12345), offset_src, offset_dst)
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", partial_then_exdev)
    store = Store(fast_tmp / "store")
    store.download(store.publish(fast_tmp / "src", "big"), fast_tmp / "out")
    assert len(calls) >= 2
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")


def test_a_corrupt_large_blob_fails_the_download_and_leaves_nothing(fast_tmp: Path, any_store: Store) -> None:
    materialize(big_tree(), fast_tmp / "src")  # type: ignore[arg-type]
    store = any_store
    ref = store.publish(fast_tmp / "src", "big")
    entry = next(e for e in store.manifest(ref).entries if e.kind == "file")
    assert entry.sha256 is not None
    data = bytearray(blob_bytes(store, entry.sha256))
    data[BIG - 10] = ord("X")
    put_blob(store, entry.sha256, bytes(data))
    (fast_tmp / "work").mkdir()
    with pytest.raises(IntegrityError, match=entry.sha256):
        store.download(ref, fast_tmp / "work" / "dest")
    assert os.listdir(fast_tmp / "work") == []


def test_a_source_changed_in_place_while_copied_never_leaves_a_blob_that_mismatches_its_name(
        fast_tmp: Path, any_store: Store) -> None:
    materialize(big_tree(), fast_tmp / "src")  # type: ignore[arg-type]
    source = fast_tmp / "src" / "big.bin"

    def scribble() -> None:
        with source.open("r+b") as handle:  # same size: only the times can tell
            handle.seek(BIG - 4096)
            handle.write(b"scribble")

    store = any_store
    # A real writer, as the second kernel copy of the file begins (the copies go 8 MiB at a time on the reference,
    # 4 MiB on the native core): the first copy is staged as it was, the rest, scribbled on, after the change.
    with changed_at_read(source, scribble, at=2) as reads:
        try:
            store.publish(fast_tmp / "src", "big")
        except Exception as err:  # noqa: BLE001 - refusing the publish is one of the two right outcomes
            assert type(err).__name__ == "SourceChangedError", err
    assert len(reads) >= 2
    report = store.verify()
    assert report.corrupt == [] and report.ok  # whatever was stored is exactly what its name says


def test_a_failed_verification_lists_every_wrong_entry_not_just_the_first() -> None:
    a = FileMeta(path="a", kind="file", mode=0o644, size=1, mtime_ns=5, atime_ns=6)
    b = FileMeta(path="b", kind="file", mode=0o600, size=1, mtime_ns=7, atime_ns=8)
    st_a = os.stat_result((0o100600, 1, 1, 1, 0, 0, 1, 6, 5, 9, 6, 5, 9, 6_000_000_000, 5_000_000_000, 9))
    st_b = os.stat_result((0o100644, 2, 1, 1, 0, 0, 1, 8, 7, 9, 8, 7, 9, 8_000_000_000, 7_000_000_000, 9))
    with pytest.raises(MetadataMismatchError) as info:
        verify_entries([(a, st_a), (b, st_b)])
    assert sorted((m.path, m.field) for m in info.value.mismatches) == [
        ("a", "atime_ns"), ("a", "mode"), ("a", "mtime_ns"), ("b", "atime_ns"), ("b", "mode"), ("b", "mtime_ns")]


def published_blob(tmp: Path) -> tuple[Store, object, str, Path]:
    """A store holding ``basic``, and the digest and blob path of its README.txt."""
    materialize("basic", tmp / "src")
    store = Store(tmp / "store")
    ref = store.publish(tmp / "src", "demo")
    entry = next(e for e in store.manifest(ref).entries if e.path == "README.txt")
    assert entry.sha256 is not None
    return store, ref, entry.sha256, Path(store.layout.blobs_dir, entry.sha256)


def test_a_blob_replaced_by_a_symlink_is_corruption_for_download_and_verify(fast_tmp: Path) -> None:
    store, ref, sha, blob = published_blob(fast_tmp)
    copy = fast_tmp / "elsewhere"
    copy.write_bytes(blob.read_bytes())
    blob.unlink()
    blob.symlink_to(copy)
    with pytest.raises(IntegrityError, match="symlink"):
        store.download(ref, fast_tmp / "out")  # type: ignore[arg-type]
    report = store.verify()
    assert not report.ok and any(sha in item for item in report.corrupt)


def test_a_fifo_planted_as_a_blob_is_refused_without_hanging(fast_tmp: Path) -> None:
    store, ref, _, blob = published_blob(fast_tmp)
    blob.unlink()
    os.mkfifo(blob)
    with pytest.raises(IntegrityError):
        store.download(ref, fast_tmp / "out")  # type: ignore[arg-type]
    assert not store.verify().ok


@pytest.mark.parametrize("call", ["gc", "verify", "list", "download", "manifest"])
def test_a_path_that_is_not_a_store_is_one_named_error_and_nothing_is_created(fast_tmp: Path, call: str) -> None:
    store = Store(fast_tmp / "typo")
    args = {"download": ("demo", fast_tmp / "out"), "manifest": ("demo",)}.get(call, ())
    with pytest.raises(NotAStoreError, match=r"no artifactkit store at .*typo$"):
        getattr(store, call)(*args)
    assert not (fast_tmp / "typo").exists() and not (fast_tmp / "out").exists()


def test_a_file_where_a_store_should_be_gets_one_clear_message(fast_tmp: Path) -> None:
    (fast_tmp / "src").mkdir()
    (fast_tmp / "file").write_text("not a store")
    for action in (lambda s: s.verify(), lambda s: s.list(), lambda s: s.publish(fast_tmp / "src", "demo")):
        with pytest.raises(NotAStoreError, match="is a file, not a directory"):
            action(Store(fast_tmp / "file"))
    with pytest.raises(NotAStoreError, match="is a file, not a directory"):
        Store(fast_tmp / "file" / "below").publish(fast_tmp / "src", "demo")


def test_publish_creates_a_missing_store_and_its_parents(fast_tmp: Path) -> None:
    supplied = materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "not" / "yet" / "store")
    store.download(store.publish(fast_tmp / "src", "demo"), fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")
    assert [str(ref) for ref in store.list()] == ["demo@1"]


@pytest.mark.parametrize("ref", ["demo@0", "demo@-1", "demo@x"])
def test_a_version_that_is_not_a_positive_integer_gets_the_same_kind_of_message(
        fast_tmp: Path, any_store: Store, ref: str) -> None:
    materialize("basic", fast_tmp / "src")
    store = any_store
    store.publish(fast_tmp / "src", "demo")
    with pytest.raises(ValueError, match=r"^version '.+' of 'demo' must be a positive integer \(1, 2, \.\.\.\)$"):
        store.resolve(ref)


def test_a_very_long_destination_name_still_gets_a_staging_directory(fast_tmp: Path, any_store: Store) -> None:
    supplied = materialize("basic", fast_tmp / "src")
    store = any_store
    dest = fast_tmp / ("d" * 250)
    store.download(store.publish(fast_tmp / "src", "demo"), dest)
    assert_metadata_equal(supplied, capture_tree(dest), stage="download")

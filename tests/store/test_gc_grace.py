"""``gc(grace_s=...)``: what gc keeps for being young is reported as kept, ``verify`` says the same, and a grace
of 0 removes every leftover no running operation holds — a killed publish's too."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path
from typing import Any

from artifactkit import Store
from artifactkit.store.gc import GcReport
from artifactkit.store.s3.leases import LeasePolicy
from artifactkit.store.verify import VerifyReport
from tests.support.stores import content_blob_names, is_bucket, plant_staging, staging_names, stored_names


def _orphan(store: Store, data: bytes) -> str:
    """An unreferenced blob, written just now (as a publish killed before its commit leaves one)."""
    sha = hashlib.sha256(data).hexdigest()
    if is_bucket(store):
        store.bucket.put(f"blobs/{sha}", data, sha256=sha)  # type: ignore[attr-defined]
    else:
        Path(store.root, "blobs", sha).write_bytes(data)
    return sha


def _store_with_leftovers(fast_tmp: Path, store: Store) -> tuple[str, str]:
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"kept by demo@1")
    store.publish(fast_tmp / "src", "demo")
    plant_staging(store, "blobs/half" if is_bucket(store) else "publish-1-00000000deadbeef")
    return _orphan(store, os.urandom(4096)), staging_names(store)[0]


def _as_verify_names(store: Store, blobs: list[str], staging: list[str]) -> list[str]:
    """gc's names in verify's words (``blobs/<sha>``, ``staging/<txn>`` or a bucket's ``uploads/<key>``)."""
    return sorted([f"blobs/{sha}" for sha in blobs]
                  + [f"{'uploads' if is_bucket(store) else 'staging'}/{name}" for name in staging])


def _agree(store: Store, gc: GcReport, verify: VerifyReport) -> None:
    assert sorted(verify.kept) == _as_verify_names(store, gc.kept_blobs, gc.kept_staging)
    assert sorted(verify.orphaned) == _as_verify_names(store, gc.removed_blobs, gc.removed_staging)
    assert verify.clean == (not gc.removed_blobs and not gc.removed_staging)


def test_gc_and_verify_agree_on_what_the_default_grace_keeps_and_what_it_would_remove(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    sha, upload = _store_with_leftovers(fast_tmp, store)
    would = store.gc(dry_run=True)
    _agree(store, would, store.verify())
    if is_bucket(store):
        # The contradiction this fixes: gc kept them for its hour of grace and said "no leftovers", while verify
        # called them orphaned (clean False, CLI exit 1) and sent the user to the gc that would not remove them.
        assert would.kept_blobs == [sha] and would.kept_staging == [upload] and would.removed_blobs == []
        assert would.grace_s == 3600 and 0 < would.kept_wait_s <= 3600 and would.kept_bytes >= 4096
        assert store.verify().clean and store.verify().grace_s == 3600
    else:
        assert would.kept_blobs == [] and would.removed_blobs == [sha] and would.grace_s == 0
    report = store.gc()
    after = store.verify()
    assert after.orphaned == [] and after.clean
    assert sorted(after.kept) == _as_verify_names(store, report.kept_blobs, report.kept_staging)


def test_a_grace_keeps_young_leftovers_on_either_store_and_says_how_long(fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    sha, upload = _store_with_leftovers(fast_tmp, store)
    report = store.gc(grace_s=600)
    assert (report.removed_blobs, report.removed_staging) == ([], [])
    assert report.kept_blobs == [sha] and report.kept_staging == [upload]
    assert report.grace_s == 600 and 0 < report.kept_wait_s <= 600 and report.kept_bytes >= 4096
    assert sha in stored_names(store, "blobs") and staging_names(store) == [upload]


def test_grace_zero_removes_every_leftover_at_once(fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    sha, upload = _store_with_leftovers(fast_tmp, store)
    report = store.gc(grace_s=0)
    assert report.removed_blobs == [sha] and report.removed_staging == [upload] and report.kept_blobs == []
    assert staging_names(store) == [] and store.verify().clean and store.verify().kept == []


def _publish_then_die(root: str, src: str) -> None:
    """Publish ``src`` and SIGKILL this process once every blob is stored, just before the version's claim."""
    import signal

    from artifactkit.store import local_backend
    from artifactkit.store.s3 import transfer

    for txn in (local_backend.LocalTxn, transfer.BucketTxn):
        real = txn.flush

        def flush_then_die(self: Any, body: bytes, real: Any = real) -> None:
            real(self, body)
            os.kill(os.getpid(), signal.SIGKILL)
        txn.flush = flush_then_die  # type: ignore[method-assign]
    store = Store(root, policy=LeasePolicy(ttl_s=1)) if root.startswith("s3://") else Store(root)
    store.publish(src, "demo")


def test_grace_zero_removes_a_killed_publishs_leftovers_and_the_next_publish_downloads(
        fast_tmp: Path, any_store: Store) -> None:
    store = any_store
    src = fast_tmp / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i}").write_bytes(os.urandom(2048))
    child = multiprocessing.get_context("spawn").Process(target=_publish_then_die, args=(str(store.root), str(src)))
    child.start()
    child.join(60)
    assert child.exitcode == -9
    # Every blob up, and the tree's one object (its root directory's), but no version.
    assert store.list() == [] and len(content_blob_names(store)) == 20 and len(stored_names(store, "blobs")) == 21
    verify = store.verify()  # kept (bucket), orphaned (local), or in progress while the dead lease looks live
    assert verify.ok and len(verify.kept + verify.orphaned + verify.in_progress) >= 20
    # The killed publisher's lease (ttl 1 s) is no proof of a running publish once stale: gc breaks it.
    collector = Store(store.root, policy=LeasePolicy(ttl_s=1, wait_s=30)) if is_bucket(store) else store
    report = collector.gc(grace_s=0)
    assert len(report.removed_blobs) == 21 and report.freed_bytes >= 20 * 2048
    assert stored_names(store, "blobs") == [] and staging_names(store) == []
    after = store.verify()
    assert after.clean and (after.orphaned, after.kept, after.in_progress) == ([], [], [])
    ref = store.publish(src, "demo")
    store.download(ref, fast_tmp / "out")
    assert all((fast_tmp / "out" / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes() for i in range(20))


def test_a_leftover_removed_between_the_listing_and_its_stat_is_no_leftover_and_no_error(
        fast_tmp: Path, monkeypatch: Any) -> None:
    # verify's listing of blobs/ raced a concurrent gc's sweep (the eight-process concurrency test caught it as
    # verify's FileNotFoundError): a name listed and then gone is skipped, never an error.
    from artifactkit.store import local_backend

    store = Store(fast_tmp / "store")
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"x")
    store.publish(fast_tmp / "src", "demo")
    listed = local_backend.listdir_fd
    monkeypatch.setattr(local_backend, "listdir_fd", lambda fd: [*listed(fd), "0" * 64])
    report = store.verify()
    assert (report.ok, report.orphaned, report.kept) == (True, [], [])

"""The gc protocol on a shared bucket: gc never deletes a blob a publish in flight is about to reference."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.errors import LeaseLostError, StoreBusyError
from artifactkit.store.s3 import leases
from artifactkit.store.s3 import transfer as s3_publish
from artifactkit.store.s3.leases import LeasePolicy, gc_lease, publish_lease
from tests.support import s3_workers

QUICK = LeasePolicy(ttl_s=2, grace_s=0, wait_s=1)
# A grace period in the future: every unreferenced blob is old enough, so only the leases protect.
NO_GRACE = LeasePolicy(ttl_s=2, grace_s=-60, wait_s=1)
# The suite runs the churn for 8 s; the acceptance run sets ARTIFACTKIT_S3_CHURN_S=20 (docs/s3.md).
CHURN_S = float(os.environ.get("ARTIFACTKIT_S3_CHURN_S", "8"))


def _orphan(store: Store, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    store.bucket.put(f"blobs/{sha}", data, sha256=sha)  # type: ignore[attr-defined]
    return sha


def _gc_during_upload(store: Store, src: Path, monkeypatch: pytest.MonkeyPatch) -> list[Exception]:
    """Publish ``src`` with a gc started (by another client) after its blobs were checked and before its commit."""
    other = Store(store.root, policy=NO_GRACE)
    failures: list[Exception] = []
    real_flush = s3_publish.BucketTxn.flush

    def upload_then_gc(txn: s3_publish.BucketTxn, body: bytes) -> None:
        real_flush(txn, body)  # every blob up: the claim comes next
        try:
            other.gc()
        except StoreBusyError as err:
            failures.append(err)

    monkeypatch.setattr(s3_publish.BucketTxn, "flush", upload_then_gc)
    store.publish(src, "raced")
    return failures


def test_gc_waits_for_a_live_publish_so_a_blob_it_skipped_as_present_survives(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(s3_url, policy=QUICK)
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"already in the bucket, referenced by nothing yet")
    _orphan(store, b"already in the bucket, referenced by nothing yet")
    failures = _gc_during_upload(store, fast_tmp / "src", monkeypatch)
    assert [type(f) for f in failures] == [StoreBusyError]
    assert store.verify().ok


def test_without_the_publish_lease_check_the_same_race_loses_the_blob(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard's own control: gc that ignores publish leases deletes the skipped blob under the publish.
    monkeypatch.setattr(leases, "live_publishers", lambda *a, **k: [])
    store = Store(s3_url, policy=QUICK)
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"already in the bucket, referenced by nothing yet")
    _orphan(store, b"already in the bucket, referenced by nothing yet")
    assert _gc_during_upload(store, fast_tmp / "src", monkeypatch) == []
    report = store.verify()
    # Lost under the publish: the skipped blob, and the tree object it had just uploaded (nothing referred to it
    # yet), so its version is broken.
    assert not report.ok and report.broken_versions and (report.missing or report.unreadable)


def test_a_publisher_waits_while_gc_holds_its_lock_and_gives_up_with_a_named_error(s3_url: str) -> None:
    store = Store(s3_url, policy=QUICK)
    bucket = store.bucket  # type: ignore[attr-defined]
    with gc_lease(bucket, QUICK), pytest.raises(StoreBusyError, match="gc holds"), publish_lease(bucket, QUICK):
        pass


def test_a_stale_publish_lease_is_broken_and_a_live_one_is_not(s3_url: str) -> None:
    store = Store(s3_url, policy=QUICK)
    bucket = store.bucket  # type: ignore[attr-defined]
    bucket.create("locks/publish/dead", b"{}")  # a publisher that was SIGKILLed: never refreshed
    with publish_lease(bucket, LeasePolicy(ttl_s=2, grace_s=0, wait_s=1)):
        time.sleep(3.2)  # age the dead one past ttl (server clock, 1 s resolution); ours refreshes meanwhile
        assert leases.live_publishers(bucket, 2, break_stale=True) != []
        assert bucket.head("locks/publish/dead") is None
    assert leases.live_publishers(bucket, 2, break_stale=False) == []


def test_a_lease_that_was_broken_refuses_to_act(s3_url: str) -> None:
    store = Store(s3_url, policy=QUICK)
    bucket = store.bucket  # type: ignore[attr-defined]
    with publish_lease(bucket, LeasePolicy(ttl_s=0.4, grace_s=0, wait_s=1)) as lease:
        lease.check()
        bucket.delete(lease.key)  # someone judged it stale and broke it
        time.sleep(0.3)  # one refresh interval (ttl/4) and then some
        with pytest.raises(LeaseLostError, match="broken"):
            lease.check()


def test_gc_keeps_an_unreferenced_blob_younger_than_the_grace_period(s3_url: str) -> None:
    young = _orphan(Store(s3_url), b"just uploaded by a publish that has not committed yet")
    assert Store(s3_url, policy=LeasePolicy(ttl_s=2, grace_s=600, wait_s=1)).gc().removed_blobs == []
    # The control: with the grace period off, the very same blob goes. (grace_s=0 would not be a control:
    # LastModified has 1 s resolution, so a blob from this second is not older than "now".)
    assert Store(s3_url, policy=NO_GRACE).gc().removed_blobs == [young]


def test_publishers_an_orphan_planter_and_a_gc_loop_together_lose_and_corrupt_nothing(
        s3_url: str, fast_tmp: Path) -> None:
    duration_s = CHURN_S
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(5) as pool:
        pubs = [pool.apply_async(s3_workers.churn_publisher, (s3_url, str(fast_tmp / f"w{i}"), i, duration_s, 5))
                for i in range(3)]
        planter = pool.apply_async(s3_workers.orphan_planter, (s3_url, duration_s))
        gcs = pool.apply_async(s3_workers.gc_loop, (s3_url, duration_s, 5))
        published = [p.get(timeout=duration_s + 120) for p in pubs]
        planted = planter.get(timeout=duration_s + 120)
        gc_runs, removed = gcs.get(timeout=duration_s + 120)
    report = Store(s3_url).verify()
    # Shown with -s: what the run did, for the record of a long (ARTIFACTKIT_S3_CHURN_S) run.
    print(f"churn {duration_s:g} s: versions={sum(published)} gc_runs={gc_runs} removed={removed} "
          f"planted={planted} missing={len(report.missing)} corrupt={len(report.corrupt)}")
    assert (report.missing, report.corrupt, report.unreadable) == ([], [], [])
    assert report.versions == sum(published)
    # The run exercised the race: publishes and gcs interleaved, and gc did sweep planted orphans.
    assert sum(published) >= 6 and gc_runs >= 3 and removed >= 1 and planted >= 10, (published, gc_runs, removed)


def test_gc_lists_unfinished_uploads_once_and_aborts_exactly_those_it_reports(s3_url: str) -> None:
    from tests.support.stores import plant_staging, staging_names

    store = Store(s3_url, policy=NO_GRACE)
    plant_staging(store, "blobs/half")
    calls = store.bucket.requests  # type: ignore[attr-defined]  # what the client sent, by S3 operation
    before = dict(calls)
    report = store.gc()
    assert report.removed_staging == ["blobs/half"]
    sent = {op: calls[op] - before.get(op, 0) for op in ("ListMultipartUploads", "AbortMultipartUpload")}
    # One listing for the report and the removal (it was two: the removal listed again and aborted whatever
    # that second listing found, which need not be what the report named).
    assert sent == {"ListMultipartUploads": 1, "AbortMultipartUpload": 1}
    assert staging_names(store) == []

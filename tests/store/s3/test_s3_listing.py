"""A bucket whose listing never ends: every listing stops at a named bound, within seconds, on every command.

The server here lies (:mod:`tests.support.lying_s3`: a proxy in front of the real SeaweedFS that forwards every
request but rewrites the listings). It stops lying by itself after a while, so code without the bounds finishes
with a wrong answer instead of hanging the suite: each test below fails there rather than hangs.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.errors import RemoteAuthError, RemoteStoreError, StoreBusyError
from artifactkit.store.s3.leases import LeasePolicy
from artifactkit.store.s3.objects import Bucket
from tests.store.s3.conftest import aws_env
from tests.support.lying_s3 import LyingS3, lying_s3

#: What a command against an endless listing may take, start to error (the bounds stop it at page 2 or 101).
QUICK_S = 10.0


def _tree(root: Path, files: int = 3) -> Path:
    root.mkdir()
    for index in range(files):
        (root / f"f{index}").write_bytes(f"file {index}\n".encode())
    return root


@pytest.fixture
def published(s3_url: str, fast_tmp: Path) -> str:
    """A bucket store holding ``demo@1`` (published through the honest endpoint)."""
    Store(s3_url).publish(_tree(fast_tmp / "src"), "demo")
    return s3_url


@pytest.fixture
def liar(seaweedfs: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[..., AbstractContextManager[LyingS3]]:
    """``with liar(lie, **options) as server``: the AWS environment points at a lying proxy of the test server
    for the block (it stops lying by itself after ``QUICK_S + 5`` s)."""
    @contextlib.contextmanager
    def start(lie: str, **options: Any) -> Iterator[LyingS3]:
        with lying_s3(seaweedfs.url, lie, max_s=QUICK_S + 5, **options) as server:
            monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
            yield server
    return start


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("artifactkit: error: "), err
    return err


def _argv(command: str, url: str, tmp: Path) -> list[str]:
    return {"ls": ["ls", "--store", url], "download": ["download", "demo", str(tmp / "out"), "--store", url],
            "verify": ["verify", "--store", url], "gc": ["gc", "--store", url]}[command]


def test_an_honest_listing_of_many_pages_is_listed_whole_in_the_order_the_server_keeps(
        s3_url: str, seaweedfs: Any) -> None:
    # Names whose keys S3 sorts byte by byte ("a-b/" before "a/") and SeaweedFS by path segment ("a/" first),
    # 1,050 keys in all: two pages, the boundary inside a run of one name.
    bucket = Bucket(seaweedfs.bucket, s3_url.partition(f"{seaweedfs.bucket}/")[2] + "/")
    keys = [f"manifests/{name}/{version}.json" for name in ("a", "a-b", "a.b", "a+b", "ab")
            for version in range(1, 211)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: bucket.put(key, b"{}"), keys))
    listed = [info.key for info in bucket.objects_under("manifests/")]
    assert sorted(listed) == sorted(keys) and len(set(listed)) == len(keys)
    assert bucket.requests["ListObjectsV2"] == 2


@pytest.mark.parametrize("command", ["ls", "download", "verify", "gc"])
@pytest.mark.parametrize(("lie", "says"), [("repeat", "does not advance"), ("empty", "without a key")])
def test_a_listing_that_never_ends_is_a_named_error_within_seconds_on_every_command(
        published: str, liar: Any, fast_tmp: Path, capsys: pytest.CaptureFixture[str], *, command: str, lie: str,
        says: str) -> None:
    with liar(lie) as server:
        started = time.monotonic()
        code = main(_argv(command, published, fast_tmp))
        took = time.monotonic() - started
    line = _one_line(capsys)
    assert code == 2, line
    assert says in line and published in line, line  # the bound, and the bucket and prefix it was hit under
    assert took < QUICK_S, f"{command} took {took:.1f} s"
    assert server.lying_pages <= 101
    assert not (fast_tmp / "out").exists()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_endless_listing_error_is_the_same_on_both_engines_and_structured_in_json(
        published: str, liar: Any, fast_tmp: Path, capsys: pytest.CaptureFixture[str], *, use_engine: Any,
        engine: str) -> None:
    use_engine(engine)
    with liar("repeat"):
        code = main([*_argv("download", published, fast_tmp), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["exit_code"] == 2
    assert doc["type"] == "ListingLimitError", doc
    assert doc["fields"]["limit"] == "advance" and doc["fields"]["url"].startswith(published), doc


def test_a_listing_that_advances_forever_stops_at_the_key_bound(
        published: str, liar: Any, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_LISTED_KEYS", "5000")
    with liar("advance") as server:
        code = main(_argv("ls", published, fast_tmp))
    line = _one_line(capsys)
    assert code == 2 and "5,000 keys" in line and "ARTIFACTKIT_MAX_LISTED_KEYS" in line, line
    assert server.lying_pages <= 6


def test_a_key_bound_that_is_not_a_number_is_refused_by_name(published: str, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_LISTED_KEYS", "20M")
    assert main(["ls", "--store", published]) == 2
    assert "ARTIFACTKIT_MAX_LISTED_KEYS='20M'" in _one_line(capsys)


def test_a_listing_that_advances_too_slowly_stops_at_its_time_budget(published: str, seaweedfs: Any,
                                                                      liar: Any) -> None:
    from artifactkit.store.s3.listing import ListingBounds

    # Each lying page takes 0.3 s and brings 1,000 keys; the budget: 1 s plus 0.1 ms per key brought.
    with liar("slow", delay_s=0.3):
        bucket = Bucket(seaweedfs.bucket, published.partition(f"{seaweedfs.bucket}/")[2] + "/",
                        listing=ListingBounds(base_s=1.0, s_per_key=0.0001))
        started = time.monotonic()
        with pytest.raises(RemoteStoreError, match="time budget") as caught:
            list(bucket.objects_under("blobs/"))
    assert time.monotonic() - started < QUICK_S
    assert type(caught.value).__name__ == "ListingLimitError" and caught.value.limit == "time"  # type: ignore[attr-defined]


@pytest.mark.parametrize("lie", ["repeat", "advance"])
def test_gc_stops_at_a_multipart_upload_listing_that_never_ends(
        published: str, liar: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        lie: str) -> None:
    monkeypatch.setenv("ARTIFACTKIT_MAX_LISTED_KEYS", "5000")
    with liar(lie, uploads=True):
        started = time.monotonic()
        code = main(["gc", "--store", published])
        took = time.monotonic() - started
    line = _one_line(capsys)
    assert code == 2 and "uploads" in line and published in line, line
    assert ("does not advance" if lie == "repeat" else "5,000 keys") in line, line
    assert took < QUICK_S


def test_verify_reads_no_more_of_a_blob_than_its_listed_size_and_one_byte(
        published: str, liar: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with liar("endless") as server:
        started = time.monotonic()
        code = main(["verify", "--store", published, "--json"])
        took = time.monotonic() - started
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and len(doc["corrupt"]) == 3, doc
    assert all("more than its" in item for item in doc["corrupt"]), doc
    # Chunks of 64 KiB the proxy got rid of: socket and client buffers take some (~12 MiB seen) before the read
    # stops, never the 3,000 (192 MiB) it sends a reader that reads to the end.
    assert took < QUICK_S and server.lying_pages < 1000


@pytest.mark.parametrize("operation", ["publish", "gc"])
def test_a_server_that_refuses_every_new_lease_is_store_busy_after_the_wait(
        s3_url: str, liar: Any, fast_tmp: Path, operation: str) -> None:
    src = _tree(fast_tmp / "src")
    with liar("refuse") as server:
        store = Store(s3_url, policy=LeasePolicy(ttl_s=2, grace_s=0, wait_s=1))
        started = time.monotonic()
        with pytest.raises(StoreBusyError, match="refused"):
            store.publish(src, "demo") if operation == "publish" else store.gc()
    assert time.monotonic() - started < QUICK_S
    assert server.lying_pages > 0


@pytest.mark.parametrize("right", [True, False], ids=["right-secret", "wrong-secret"])
def test_a_listing_is_signed_with_a_profiles_keys_too(seaweedfs: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, right: bool) -> None:
    for key, value in aws_env(seaweedfs).items():
        monkeypatch.setenv(key, value)
    Bucket(seaweedfs.bucket, "profile-listing/").put("blobs/a", b"a")
    # Only a named profile in temp config files: no static keys, so boto3's chain answers.
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key)
    (tmp_path / "config").write_text(f"[profile ci]\nregion = {seaweedfs.region}\nendpoint_url = {seaweedfs.url}\n")
    key = seaweedfs.secret_key if right else "not-the-secret"
    (tmp_path / "credentials").write_text(f"[ci]\naws_access_key_id = {seaweedfs.access_key}\n"
                                          f"aws_secret_access_key = {key}\n")
    for name, value in (("AWS_CONFIG_FILE", "config"), ("AWS_SHARED_CREDENTIALS_FILE", "credentials")):
        monkeypatch.setenv(name, str(tmp_path / value))
    monkeypatch.setenv("AWS_PROFILE", "ci")
    listing = Bucket(seaweedfs.bucket, "profile-listing/").objects_under("blobs/")
    if right:
        assert [info.key for info in listing] == ["blobs/a"]
    else:
        with pytest.raises(RemoteAuthError, match="access refused"):
            list(listing)

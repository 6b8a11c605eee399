"""Faults on a bucket store: each is a named error and a one-line CLI message; no visible version is incomplete."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from artifactkit import IntegrityError, Store
from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import BucketNotFoundError, MissingExtraError, RemoteAuthError, RemoteUnavailableError
from artifactkit.store.s3 import download as s3_download
from artifactkit.store.s3 import objects
from artifactkit.store.s3 import transfer as s3_publish
from artifactkit.store.s3.leases import LeasePolicy
from artifactkit.store.s3.objects import Bucket
from tests.support.capability import require_module


def _tree(root: Path, files: int, size: int = 1000) -> Path:
    root.mkdir()
    for index in range(files):
        (root / f"f{index:03}").write_bytes(f"{index}:".encode() * (size // 4))
    return root


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("artifactkit: error: "), err
    return err


def test_using_an_s3_store_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # the extra's modules: obstore, and boto3 for profiles
    monkeypatch.setitem(sys.modules, "obstore", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'artifactkit\[s3\]'"):
        Store("s3://some-bucket/p")


def test_wrong_credentials_are_a_named_error_and_exit_2(s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(RemoteAuthError, match="access refused"):
        Store(s3_url).publish(_tree(fast_tmp / "src", 1), "x")
    assert main(["ls", "--store", s3_url]) == 2
    assert "access refused" in _one_line_error(capsys)


def test_a_missing_bucket_is_a_named_error_and_exit_2(s3_url: str, fast_tmp: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    url = "s3://no-such-bucket-here/p"
    with pytest.raises(BucketNotFoundError):
        Store(url).publish(_tree(fast_tmp / "src", 1), "x")
    assert main(["verify", "--store", url]) == 2
    assert "does not exist" in _one_line_error(capsys)


@pytest.mark.parametrize("fault", ["corrupt", "missing"])
def test_a_corrupt_or_missing_blob_fails_download_and_verify_with_exit_1(
        s3_url: str, fast_tmp: Path, raw_s3: Any, fault: str, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(s3_url)
    ref = store.publish(fast_tmp / "src", "b")
    sha = store.manifest(ref).files()[0].sha256
    bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
    if fault == "corrupt":
        raw_s3.put_object(Bucket=bucket, Key=f"{prefix}/blobs/{sha}", Body=b"flipped")
    else:
        raw_s3.delete_object(Bucket=bucket, Key=f"{prefix}/blobs/{sha}")
    with pytest.raises(IntegrityError) as caught:
        store.download(ref, fast_tmp / "out")
    assert caught.value.failed == fault and not (fast_tmp / "out").exists()  # type: ignore[attr-defined]
    assert os.listdir(fast_tmp) == ["src"]  # no blob dir or staging left behind
    report = store.verify()
    assert not report.ok and len(report.corrupt if fault == "corrupt" else report.missing) == 1
    capsys.readouterr()
    assert main(["download", "b@1", str(fast_tmp / "out"), "--store", s3_url]) == 1
    assert sha in _one_line_error(capsys)


def test_a_server_that_never_answers_is_a_named_error_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    require_module("obstore", "pip install 'artifactkit[s3]'")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        for key, value in {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(RemoteUnavailableError, match="unreachable or too slow"):
            Bucket("bucket", "", read_timeout_s=0.3, retry_s=0).head("blobs/x")


def test_a_server_stopped_mid_publish_leaves_no_version_and_a_rerun_reuses_the_uploaded_blobs(
        private_server: Any, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"s3://{private_server.endpoint.bucket}/p"
    src = _tree(fast_tmp / "src", 6)
    real_upload, uploads = s3_publish.upload_blob, []

    def upload_then_die(*args: Any) -> None:
        real_upload(*args)
        if not uploads:
            uploads.append(args[1])
            private_server.stop()

    monkeypatch.setattr(s3_publish, "upload_blob", upload_then_die)
    with pytest.raises(RemoteUnavailableError):
        Store(url).publish(src, "p")
    monkeypatch.undo()
    private_server.start()
    store = Store(url)
    assert store.list() == []
    arrived = len(list(store.bucket.objects_under("blobs/")))  # type: ignore[attr-defined]
    puts: list[str] = []
    real_put = objects.Bucket.put
    monkeypatch.setattr(objects.Bucket, "put",
                        lambda self, key, *a, **k: puts.append(key) or real_put(self, key, *a, **k))
    assert store.publish(src, "p").version == 1
    # What went up before the crash (of six blobs and the tree's one object) was reused.
    assert arrived >= 1 and len(puts) == 7 - arrived
    assert store.verify().ok


def test_a_server_stopped_mid_download_leaves_nothing_at_dest(private_server: Any, fast_tmp: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"s3://{private_server.endpoint.bucket}/d"
    ref = Store(url).publish(_tree(fast_tmp / "src", 6), "d")
    real_fetch = s3_download.fetch_whole
    once = threading.Lock()  # blobs are fetched on several threads: the server is stopped by the first
    stopped = threading.Event()

    def fetch_then_die(*args: Any) -> None:
        if not once.acquire(blocking=False):
            # The others wait for the stop (a condition, not a delay): had they fetched meanwhile, a loaded
            # machine could finish every blob while the server was still shutting down.
            stopped.wait()
            real_fetch(*args)
            return
        try:
            real_fetch(*args)
            private_server.stop()
        finally:
            stopped.set()

    monkeypatch.setattr(s3_download, "fetch_whole", fetch_then_die)
    with pytest.raises(RemoteUnavailableError):
        Store(url).download(ref, fast_tmp / "out")
    assert sorted(os.listdir(fast_tmp)) == ["src"]
    monkeypatch.undo()
    private_server.start()
    Store(url).download(ref, fast_tmp / "out")


TRIALS = int(os.environ.get("ARTIFACTKIT_S3_KILL_TRIALS", "6"))


def test_a_publisher_sigkilled_at_random_points_never_leaves_a_visible_incomplete_version(
        s3_url: str, fast_tmp: Path) -> None:
    rng = random.Random(15)
    cli = [sys.executable, "-m", "artifactkit.cli", "publish", "--store", s3_url, "--name", "k"]
    # The kills are aimed within how long one whole publish of such a tree takes here (measured, not
    # guessed): a fixed 0.3-1.3 s window let a quick machine finish most publishes first (2 of 6 killed).
    _tree(fast_tmp / "warm", 60, size=20_000)
    started = time.monotonic()
    subprocess.run([*cli[:-1], "warm", str(fast_tmp / "warm")], check=True, stdout=subprocess.DEVNULL)
    whole_s = time.monotonic() - started
    killed = 0
    for trial in range(TRIALS):
        src = _tree(fast_tmp / f"src{trial}", 60, size=20_000)
        # Its temp dir inside the test's: what a SIGKILL leaves (its empty staging dir) goes with the test.
        tmp = fast_tmp / f"tmp{trial}"
        tmp.mkdir()
        proc = subprocess.Popen([*cli, str(src)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "TMPDIR": str(tmp)})
        try:
            proc.wait(timeout=rng.uniform(0.1, 0.8) * whole_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed += 1
        report = Store(s3_url).verify()
        assert (report.missing, report.corrupt, report.unreadable) == ([], [], []), f"trial {trial}"
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} publishers were killed before they finished"
    quick = Store(s3_url, policy=LeasePolicy(ttl_s=1, grace_s=-60, wait_s=10))
    quick.gc()  # killed publishers' leases are stale after ttl: gc breaks them and sweeps their blobs
    assert Store(s3_url).verify().clean
    assert subprocess.run([*cli, str(fast_tmp / "src0")], check=False).returncode == 0

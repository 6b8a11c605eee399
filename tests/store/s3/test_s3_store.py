"""A bucket store round trip between "machines": exact metadata, transparent blobs, distinct versions."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store, assert_metadata_equal
from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.manifest.tree_format import OBJECT_STARTS
from artifactkit.store.local_backend import LocalBackend
from artifactkit.store.s3 import download as s3_download
from artifactkit.store.s3 import objects
from artifactkit.store.s3 import transfer as s3_publish
from artifactkit.store.s3.backend import S3Backend
from tests.support import s3_workers
from tests.support.capability import require_module


def test_store_with_an_s3_url_is_a_bucket_store_and_a_path_is_still_local(tmp_path: Path) -> None:
    require_module("boto3", "pip install 'artifactkit[s3]'")
    assert type(Store("s3://some-bucket/a/prefix").backend) is S3Backend
    assert type(Store(tmp_path / "local").backend) is LocalBackend
    assert Store("s3://some-bucket/a/prefix").bucket.prefix == "a/prefix/"  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["s3://x/p", "s3://Bad_Bucket/p", "s3://bucket/a//b", "s3://bucket/a/../b"])
def test_an_s3_url_with_a_bad_bucket_or_an_unnormalised_prefix_is_refused(url: str) -> None:
    from artifactkit import UnsafePathError

    with pytest.raises(UnsafePathError):
        Store(url)


def test_publish_in_one_process_and_download_in_another_is_exact_and_blobs_hash_to_their_names(
        s3_url: str, fast_tmp: Path, raw_s3: Any) -> None:
    machine_a, machine_b = fast_tmp / "a", fast_tmp / "b"
    machine_a.mkdir()
    machine_b.mkdir()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool_a, ctx.Pool(1) as pool_b:
        version, digest, supplied = pool_a.apply(s3_workers.publish_corpus, (str(machine_a), s3_url, "edge-times", "e"))
        assert pool_b.apply(s3_workers.download, (str(machine_b), s3_url, f"e@{version}")) == "e@1"
    assert (version, len(digest)) == (1, 64)
    # Read back independently of both machines (lstat before any read): every field exact.
    got = capture_tree(machine_b / "out")
    assert_metadata_equal(supplied, got, stage="read back of machine b's download")
    bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
    keys = [o["Key"] for o in raw_s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/blobs/")["Contents"]]
    wanted = {e.sha256 for e in supplied if e.kind == "file"} | {e.sha256 for e in got if e.kind == "file"}
    bodies = {k.rpartition("/")[2]: raw_s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}
    # Every file's content, and the tree's objects (its directories, format 3): each named by its sha256.
    assert {name for name, body in bodies.items() if not body.startswith(OBJECT_STARTS)} == wanted
    assert any(body.startswith(OBJECT_STARTS) for body in bodies.values())
    for name, body in bodies.items():
        assert hashlib.sha256(body).hexdigest() == name
    manifest = raw_s3.get_object(Bucket=bucket, Key=f"{prefix}/manifests/e/1.json")["Body"].read()
    assert hashlib.sha256(manifest).hexdigest() == digest  # a person can sha256sum the manifest too


def test_republishing_an_unchanged_tree_sends_no_blob_bytes(s3_url: str, fast_tmp: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(s3_url)
    store.publish(fast_tmp / "src", "again")
    puts: list[str] = []
    real_put = objects.Bucket.put
    monkeypatch.setattr(objects.Bucket, "put",
                        lambda self, key, *a, **k: puts.append(key) or real_put(self, key, *a, **k))
    assert store.publish(fast_tmp / "src", "again").version == 2
    assert puts == []


def test_a_large_file_goes_up_in_parts_and_comes_down_in_ranges_exactly(
        s3_url: str, fast_tmp: Path, raw_s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 MiB parts are the S3 minimum; lower the thresholds so 12 MiB makes three parts and three ranges.
    for module in (objects, s3_publish):
        monkeypatch.setattr(module, "MULTIPART_THRESHOLD", 10 << 20)
    monkeypatch.setattr(s3_download, "RANGES_FROM", 10 << 20)
    for module in (objects, s3_download):
        monkeypatch.setattr(module, "PART_SIZE", 5 << 20)
    src = fast_tmp / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(12 << 20))
    os.utime(src / "big", ns=(1_000_000_001, 2_000_000_002))
    supplied = capture_tree(src)
    store = Store(s3_url)
    ref = store.publish(src, "big")
    sha = next(e.sha256 for e in supplied if e.path == "big")
    bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
    assert raw_s3.head_object(Bucket=bucket, Key=f"{prefix}/blobs/{sha}")["ETag"].endswith('-3"')
    store.download(ref, fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")


def test_every_cli_store_command_takes_an_s3_url(s3_url: str, fast_tmp: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    supplied = materialize("basic", fast_tmp / "src")
    assert main(["publish", str(fast_tmp / "src"), "--store", s3_url, "--name", "cli"]) == 0
    assert main(["ls", "--store", s3_url]) == 0
    assert "cli" in capsys.readouterr().out
    assert main(["download", "cli@1", str(fast_tmp / "out"), "--store", s3_url]) == 0
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="cli download")
    assert main(["verify", "--store", s3_url]) == 0


def test_the_server_refuses_blob_bytes_that_do_not_hash_to_the_blob_name(s3_url: str) -> None:
    from artifactkit.errors import RemoteStoreError

    bucket = Store(s3_url).bucket  # type: ignore[attr-defined]
    with pytest.raises(RemoteStoreError, match="BadDigest"):
        bucket.put("blobs/x", b"hello", sha256=hashlib.sha256(b"other bytes").hexdigest())
    assert bucket.head("blobs/x") is None


def test_a_first_publish_checks_the_bucket_once_not_once_per_new_blob(s3_url: str, fast_tmp: Path) -> None:
    # A HEAD that misses cannot tell a missing key from a missing bucket; asking head_bucket after each
    # miss cost one request per new blob (10,002 on a 10,000-file publish, seen in bench_s3).
    src = fast_tmp / "src"
    src.mkdir()
    for index in range(20):
        (src / f"f{index}").write_bytes(f"content {index}".encode())
    store = Store(s3_url)
    calls = store.bucket.requests  # type: ignore[attr-defined]  # what the client sent, by S3 operation
    store.publish(src, "once")
    # The blobs are looked up by one listing of blobs/ (cheaper than 20 HEADs), the bucket checked once.
    assert calls.get("HeadObject", 0) < 20, calls
    assert calls.get("HeadBucket", 0) <= 1, calls

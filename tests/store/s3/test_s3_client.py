"""The bucket client against a real SeaweedFS: credentials from a profile, http vs https, the error vocabulary,
and the requests obstore cannot make itself (conditional DELETE, the server's clock, the retry read-back)."""

from __future__ import annotations

import hashlib
import secrets
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from artifactkit.errors import BucketNotFoundError, RemoteAuthError, RemoteUnavailableError
from artifactkit.store.s3.objects import Bucket
from tests.store.s3.conftest import aws_env


@pytest.fixture
def env(seaweedfs: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in aws_env(seaweedfs).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return seaweedfs


def _bucket(endpoint: Any) -> Bucket:
    return Bucket(endpoint.bucket, f"c-{secrets.token_hex(6)}/")


def _profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: Any, secret: str) -> None:
    """Only a named profile in temp config files: no static keys, region or endpoint in the environment."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
                "AWS_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "config").write_text(f"[profile ci]\nregion = {endpoint.region}\nendpoint_url = {endpoint.url}\n")
    (tmp_path / "credentials").write_text(
        f"[ci]\naws_access_key_id = {endpoint.access_key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "ci")


def test_keys_region_and_endpoint_come_from_a_profile_when_the_environment_has_no_static_keys(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, env, env.secret_key)
    bucket = _bucket(env)
    assert bucket.endpoint == env.url
    bucket.check_bucket()
    etag = bucket.put("k", b"from a profile")
    assert bucket.get_bytes("k") == b"from a profile" and bucket.head("k") is not None
    assert bucket.head("k").etag == etag  # type: ignore[union-attr]


def test_a_profile_with_a_wrong_secret_is_refused_as_an_auth_error(env: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, env, "not-the-secret")
    with pytest.raises(RemoteAuthError, match="access refused"):
        _bucket(env).put("k", b"x")


def test_no_credentials_anywhere_is_an_auth_error_naming_the_chain(env: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, env, env.secret_key)
    (tmp_path / "credentials").write_text("")
    monkeypatch.delenv("AWS_PROFILE")
    (tmp_path / "config").write_text(f"[default]\nregion = {env.region}\nendpoint_url = {env.url}\n")
    with pytest.raises(RemoteAuthError, match="no credentials found"):
        _bucket(env).head("k")


@pytest.mark.parametrize("operation", ["check_bucket", "head", "put", "get", "list", "server_now"])
def test_a_wrong_secret_is_an_auth_error_for_every_kind_of_request(env: Any, monkeypatch: pytest.MonkeyPatch,
                                                                   operation: str) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(RemoteAuthError, match="access refused"):
        _call(_bucket(env), operation)


@pytest.mark.parametrize("operation", ["check_bucket", "head", "put", "get", "list", "server_now"])
def test_a_missing_bucket_is_bucket_not_found_for_every_kind_of_request(env: Any, operation: str) -> None:
    with pytest.raises(BucketNotFoundError, match="does not exist"):
        _call(Bucket("no-such-bucket-here", "p/"), operation)


@pytest.mark.parametrize("operation", ["check_bucket", "head", "put", "get", "list", "server_now"])
def test_a_dead_port_is_unavailable_for_every_kind_of_request(env: Any, monkeypatch: pytest.MonkeyPatch,
                                                              operation: str) -> None:
    with socket.socket() as closed:  # a port just bound and released: nothing listens there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    bucket = Bucket(env.bucket, "p/", retry_s=0)
    with pytest.raises(RemoteUnavailableError, match="unreachable"):
        _call(bucket, operation)
    assert bucket.endpoint == f"http://127.0.0.1:{port}"


def _call(bucket: Bucket, operation: str) -> object:
    calls = {"check_bucket": bucket.check_bucket, "head": lambda: bucket.head("k"),
             "put": lambda: bucket.put("k", b"x"), "get": lambda: bucket.get_bytes("k"),
             "list": lambda: list(bucket.objects_under("blobs/")), "server_now": bucket.server_now}
    return calls[operation]()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A SeaweedFS of its own with an https listener for 127.0.0.1 on a certificate of a private CA (yielded)."""
    from tests.support.seaweedfs import running_seaweedfs

    # A CA and a server certificate it signed (rustls refuses a self-signed CA used as the server's own).
    ca, ca_key, cert, key, ext = (tmp_path / name for name in ("ca.pem", "ca.key", "cert.pem", "key.pem", "ext"))
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    for command in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=artifactkit test CA",
                     "-keyout", str(ca_key), "-out", str(ca)],
                    ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key),
                     "-out", str(tmp_path / "csr")],
                    ["x509", "-req", "-in", str(tmp_path / "csr"), "-CA", str(ca), "-CAkey", str(ca_key),
                     "-CAcreateserial", "-days", "1", "-extfile", str(ext), "-out", str(cert)]):
        subprocess.run(["openssl", *command], check=True, capture_output=True)
    # Its own data directory, removed afterwards (weed's files are not the test's to keep).
    with tempfile.TemporaryDirectory(prefix="artifactkit-weed-tls-") as data, \
            running_seaweedfs(data, tls=(str(cert), str(key))) as server:
        yield server, ca


def test_an_http_endpoint_works_and_an_https_one_keeps_certificate_checks(
        env: Any, tls_server: tuple[Any, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    server, ca = tls_server
    for key, value in aws_env(server).items():
        monkeypatch.setenv(key, value)
    plain = _bucket(server)
    plain.put("k", b"over http")  # allow_http, for the http:// endpoint only
    assert str(plain.store.client_options["allow_http"]).lower() == "true"
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.https_url)
    strict = _bucket(server)
    options = strict.store.client_options
    assert (str(options["allow_http"]).lower(), str(options["allow_invalid_certificates"]).lower()) == ("false",) * 2
    with pytest.raises(RemoteUnavailableError, match=r"certificate .* not trusted"):
        strict.head("k")  # a CA nobody said to trust: refused by obstore ...
    with pytest.raises(RemoteUnavailableError, match=r"certificate .* not trusted"):
        strict.server_now()  # ... and by the presigned requests
    monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))  # trusted as boto3 trusts it
    trusted = Bucket(server.bucket, plain.prefix)
    assert trusted.get_bytes("k") == b"over http" and trusted.delete_if_match("k", trusted.head("k").etag)  # type: ignore[union-attr]


def test_create_reads_back_a_412_and_claims_only_a_write_with_its_own_nonce(env: Any) -> None:
    bucket = _bucket(env)
    body, mine = b'{"manifest": 1}', {"writer": "aaaa"}
    landed = bucket.put("m", body, metadata=mine)  # as if obstore's first attempt landed and its answer was lost
    assert bucket.create("m", body, metadata=mine) == landed  # the 412 of the retry was our own write
    assert bucket.create("m", body, metadata={"writer": "bbbb"}) is None  # equal bytes, another writer
    assert bucket.create("m", body + b" ", metadata=mine) is None
    assert bucket.create("fresh", body, metadata=mine) is not None


def test_conditional_writes_and_deletes_answer_by_etag(env: Any) -> None:
    bucket = _bucket(env)
    first = bucket.create("lock", b"1")
    assert first is not None and bucket.create("lock", b"2") is None
    second = bucket.replace("lock", b"3", first)
    assert second is not None and bucket.replace("lock", b"4", first) is None
    assert bucket.delete_if_match("lock", first) is False and bucket.get_bytes("lock") == b"3"
    assert bucket.delete_if_match("lock", second) is True and bucket.head("lock") is None
    assert bucket.replace("lock", b"5", second) is None  # vanished


def test_the_server_clock_listing_order_and_bounded_reads(env: Any) -> None:
    bucket = _bucket(env)
    assert abs((bucket.server_now() - datetime.now(UTC)).total_seconds()) < 60
    for key in ("b/2", "b/10", "b/1", "bc/x", "a/1"):
        bucket.put(key, key.encode(), sha256=hashlib.sha256(key.encode()).hexdigest())
    assert [info.key for info in bucket.objects_under("b/")] == ["b/1", "b/10", "b/2"]
    assert [info.key for info in bucket.objects_under("b")] == ["b/1", "b/10", "b/2", "bc/x"]
    bucket.put("big", b"x" * 100_000, metadata={"sha256": "pinned"})
    assert bucket.get_bounded("big", 99_999) == (b"", {"sha256": "pinned"}, 100_000)
    assert bucket.get_bounded("big", 100_000) == (b"x" * 100_000, {"sha256": "pinned"}, 100_000)
    assert bucket.get_bounded("absent", 10) is None
    with bucket.stream("big", first=10, last=19) as body:
        assert body.read(4) + body.read() == b"x" * 10
    assert bucket.requests["HeadBucket"] == 1 and bucket.requests["PutObject"] == 6


def test_a_profile_that_does_not_exist_is_an_auth_error_naming_it(env: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, env, env.secret_key)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(RemoteAuthError, match="no-such-profile"):
        _bucket(env)


def test_stale_multipart_uploads_are_listed_by_a_dry_run_and_aborted_otherwise(env: Any, raw_s3: Any) -> None:
    bucket = _bucket(env)
    upload = raw_s3.create_multipart_upload(Bucket=env.bucket, Key=f"{bucket.prefix}blobs/half")["UploadId"]
    future = datetime.now(UTC).replace(year=datetime.now(UTC).year + 1)
    assert bucket.abort_uploads_before(datetime(2000, 1, 1, tzinfo=UTC)) == []  # started after the cutoff
    assert bucket.abort_uploads_before(future, dry_run=True) == ["blobs/half"]
    assert bucket.abort_uploads_before(future) == ["blobs/half"]
    left = raw_s3.list_multipart_uploads(Bucket=env.bucket, Prefix=bucket.prefix).get("Uploads", [])
    assert upload not in [item["UploadId"] for item in left]

"""The bucket-store tests' view of the real S3 server (``seaweedfs``, in ``tests/conftest.py``)."""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from typing import Any

import pytest


def aws_env(endpoint: Any) -> dict[str, str]:
    """The standard AWS variables for ``endpoint``, and nothing from this machine's own AWS config."""
    return {**endpoint.env(), "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}


@pytest.fixture
def s3_url(seaweedfs: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh ``s3://bucket/prefix`` store per test; the AWS env is set (and inherited by spawned children)."""
    for key, value in aws_env(seaweedfs).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return f"s3://{seaweedfs.bucket}/t-{secrets.token_hex(6)}"


@pytest.fixture
def raw_s3(seaweedfs: Any) -> Any:
    """A plain boto3 client on the test server: the "any S3 tool" view of a bucket store."""
    import boto3

    return boto3.client("s3", endpoint_url=seaweedfs.url, aws_access_key_id=seaweedfs.access_key,
                        aws_secret_access_key=seaweedfs.secret_key, region_name=seaweedfs.region)


@pytest.fixture
def private_server(monkeypatch: pytest.MonkeyPatch, seaweedfs: Any) -> Any:
    """A server of this test's own, which it may stop and start again on the same data; its tests stop it to see
    an operation fail, so the client's retries give up after 1 s (``tests/store/s3/test_s3_outages.py`` rides
    outages out with the default budget)."""
    from tests.support.seaweedfs import running_seaweedfs

    monkeypatch.setenv("ARTIFACTKIT_S3_RETRY_S", "1")
    data = tempfile.mkdtemp(prefix="artifactkit-weed-own-")
    keys = {"access_key": "ak" + secrets.token_hex(8), "secret_key": secrets.token_hex(20)}  # kept across restarts

    class Server:
        endpoint: Any = None

        def start(self) -> None:
            self._cm = running_seaweedfs(data, **keys)
            self.endpoint = self._cm.__enter__()
            for key, value in aws_env(self.endpoint).items():
                monkeypatch.setenv(key, value)

        def stop(self) -> None:
            """A stop as an operator does it (SIGTERM): what it acknowledged is kept."""
            if self.endpoint is not None:
                self._cm.__exit__(None, None, None)
                self.endpoint = None

    server = Server()
    server.start()
    yield server
    server.stop()
    subprocess.run(["rm", "-rf", data], check=False)

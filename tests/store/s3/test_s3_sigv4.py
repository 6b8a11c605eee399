"""The listing's own SigV4 signer, held to the AWS documentation's worked example and to botocore's signer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from artifactkit.store.s3.sigv4 import EMPTY_SHA256, encode_query, signed_headers
from tests.support.capability import require_module

# The documentation's example keys (AWS's "Signature Calculations for the Authorization Header").
ACCESS, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_the_documented_list_objects_example_signs_to_the_documented_signature() -> None:
    # "Example: GET Bucket (List Objects)": GET /?max-keys=2&prefix=J to examplebucket, 2013-05-24, us-east-1.
    headers = signed_headers(host="examplebucket.s3.amazonaws.com", path="/",
                             query=encode_query({"max-keys": "2", "prefix": "J"}), region="us-east-1",
                             access_key=ACCESS, secret_key=SECRET, token=None,
                             now=datetime(2013, 5, 24, tzinfo=UTC))
    assert headers["x-amz-content-sha256"] == EMPTY_SHA256 and headers["x-amz-date"] == "20130524T000000Z"
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")


@pytest.mark.parametrize("params", [
    {"list-type": "2", "prefix": "t-1/blobs/", "max-keys": "1000", "encoding-type": "url"},
    {"list-type": "2", "prefix": "a b/ü+&=%/~", "continuation-token": "1/xY+z==", "max-keys": "1000"},
])
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLE//session+token="])
def test_a_listing_request_signs_as_botocore_signs_it(params: dict[str, str], token: str | None) -> None:
    require_module("botocore", "pip install 'artifactkit[s3]' (boto3 brings botocore, the signer held against)")
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    host, path = "127.0.0.1:8333", "/the-bucket/"
    query = encode_query(params)
    ours = signed_headers(host=host, path=path, query=query, region="eu-west-3", access_key=ACCESS,
                          secret_key=SECRET, token=token, now=now)
    request = AWSRequest(method="GET", url=f"http://{host}{path}?{query}",
                         headers={"x-amz-content-sha256": EMPTY_SHA256})
    request.context["timestamp"] = now.strftime("%Y%m%dT%H%M%SZ")
    auth = S3SigV4Auth(Credentials(ACCESS, SECRET, token), "s3", "eu-west-3")
    request.headers["X-Amz-Date"] = request.context["timestamp"]
    if token:
        request.headers["X-Amz-Security-Token"] = token
    canonical = auth.canonical_request(request)
    theirs = auth.signature(auth.string_to_sign(request, canonical), request)
    assert ours["Authorization"].rpartition("Signature=")[2] == theirs

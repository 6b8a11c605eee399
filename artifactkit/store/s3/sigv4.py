"""AWS Signature Version 4 for one GET of a bucket: what the paged listing signs its requests with.

obstore signs everything else, but it lists a prefix only as one stream that follows the server's continuation
tokens itself (:mod:`~artifactkit.store.s3.listing` says why that cannot be bounded), and its presigned URLs
cannot carry a query of ours. So a listing page is signed here, in the header form of the AWS documentation
("Signature Calculations for the Authorization Header"), for an empty payload. ``tests/store/s3/test_s3_sigv4.py``
holds it to botocore's signer and to the worked example of that page.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from datetime import datetime
from typing import Final

#: sha256 of an empty body: the ``x-amz-content-sha256`` of a GET.
EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
_UNRESERVED: Final = "-_.~"  # with letters and digits, what SigV4 leaves unencoded (RFC 3986)


def encode_query(params: dict[str, str]) -> str:
    """The canonical query string: names and values percent-encoded as SigV4 wants, sorted by name."""
    pairs = sorted((urllib.parse.quote(k, safe=_UNRESERVED), urllib.parse.quote(v, safe=_UNRESERVED))
                   for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(*, host: str, path: str, query: str, region: str, access_key: str, secret_key: str,
                   token: str | None, now: datetime) -> dict[str, str]:
    """The headers that authenticate ``GET path?query`` to ``host`` at ``now`` (UTC), for service ``s3``.

    ``path`` is sent as given (S3 does not normalise it, and neither does the signature); ``query`` is
    :func:`encode_query`'s, sent as is, so the server's canonical form of it is the one signed here.
    """
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    names = ";".join(sorted(headers))
    canonical = "\n".join(["GET", urllib.parse.quote(path, safe="/" + _UNRESERVED), query,
                           "".join(f"{name}:{headers[name].strip()}\n" for name in sorted(headers)), names,
                           EMPTY_SHA256])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={names}, "
                                f"Signature={signature}")
    return headers

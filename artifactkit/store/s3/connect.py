"""Where a bucket is and who we are to it: the standard AWS environment turned into an obstore client.

Endpoint (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``), region (``AWS_REGION``, ``AWS_DEFAULT_REGION``) and
static keys (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``) are read here and handed
to obstore explicitly. Without static keys in the environment, boto3's credential chain answers (``AWS_PROFILE``,
``~/.aws/config`` and ``credentials``, SSO, assume-role, instance roles): boto3 is imported only then, and asked
for keys only when the first request needs them (its chain may probe instance metadata, which takes seconds
off EC2). ``allow_http`` is set only for an ``http://`` endpoint; certificates are always checked
(``AWS_CA_BUNDLE`` adds a private CA, as for boto3).

A few requests obstore cannot express (a DELETE with ``If-Match``, a HEAD of the bucket, the server's
``Date``) go as presigned URLs through :mod:`urllib`, with the same timeouts. Every request here is one
attempt: :mod:`~artifactkit.store.s3.retries` sends them again, counted and within its budget.
"""

from __future__ import annotations

import importlib
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs

from artifactkit.errors import MissingExtraError
from artifactkit.store.s3.sigv4 import encode_query, signed_headers

#: The modules of the ``s3`` extra; boto3 only for a profile's credentials and the multipart-upload listing.
EXTRA_HINT: Final = "s3:// stores need obstore>=0.12.1 (and boto3 for profiles): pip install 'artifactkit[s3]'"
_REFRESH: Final = timedelta(minutes=5)  # how long obstore may keep keys from a refreshable (temporary) source
#: obstore's and boto3's own retries: none (they would be uncounted and outside the retry budget).
CLIENT_RETRIES: Final = 0


def import_extra(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(f"{EXTRA_HINT} ({err})", extra="s3") from err


@attrs.frozen
class Limits:
    """Timeouts of one attempt, the same for obstore's requests and the presigned ones."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0  # a stall between two reads; the whole request is bounded by ``request_s``
    request_s: float = 900.0  # a backstop for one request (a 16 MiB part on a slow link), not the stall detector
    max_connections: int = 32  # idle connections kept: one per download worker, so none is opened twice


class NoCredentialsError(Exception):
    """Neither static keys in the environment nor anything in boto3's chain."""


class _Boto3Credentials:
    """obstore's credential provider backed by one boto3 session (profile, SSO, assume-role, instance role)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._credentials: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            try:  # botocore's own failures (an expired SSO token, a role it may not assume) say why
                if self._credentials is None:
                    self._credentials = self._session.get_credentials()
                frozen = None if self._credentials is None else self._credentials.get_frozen_credentials()
            except Exception as err:
                raise NoCredentialsError(f"no credentials found in the AWS environment/config chain ({err})") \
                    from err
            if frozen is None:
                raise NoCredentialsError("no credentials found in the AWS environment/config chain")
            refreshable = hasattr(self._credentials, "refresh_needed")
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key, "token": frozen.token,
                "expires_at": datetime.now(UTC) + _REFRESH if refreshable else None}


class Connection:
    """An obstore ``S3Store`` for one bucket, plus what the presigned requests need."""

    def __init__(self, bucket: str, limits: Limits) -> None:
        obstore_store = import_extra("obstore.store")
        env = os.environ
        static = bool(env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"))
        boto3: Any = None if static else import_extra("boto3")
        session: Any = None
        profile: dict[str, Any] = {}
        if boto3 is not None:
            try:  # a profile's own region and endpoint_url, as boto3 itself would use them
                session = boto3.session.Session()
                profile = dict(session._session.get_scoped_config())
            except Exception as err:  # an AWS_PROFILE that names no profile, an unreadable config
                raise NoCredentialsError(f"no credentials found in the AWS environment/config chain ({err})") \
                    from err
        self.session = session
        self._boto3: Any = None
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or profile.get("endpoint_url")
        self.region: str = (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or profile.get("region")
                            or "us-east-1")
        self.custom_endpoint = endpoint is not None
        self.endpoint: str = (endpoint or f"https://s3.{self.region}.amazonaws.com").rstrip("/")
        self.limits = limits
        # As in botocore, a plain-http endpoint never reads AWS_CA_BUNDLE (machines set it globally). For https
        # it adds to the trusted roots (obstore has no "only these"), and certificates are checked either way.
        ca_bundle = env.get("AWS_CA_BUNDLE") if self.endpoint.startswith("https://") else None
        client: dict[str, Any] = {
            # Plain http only where the URL says so; an https endpoint keeps full certificate checks.
            "allow_http": self.endpoint.startswith("http://"), "allow_invalid_certificates": False,
            "connect_timeout": timedelta(seconds=limits.connect_timeout_s),
            "read_timeout": timedelta(seconds=limits.read_timeout_s),
            "timeout": timedelta(seconds=limits.request_s),
            "pool_max_idle_per_host": str(limits.max_connections)}
        if ca_bundle:
            with open(ca_bundle, "rb") as pem:
                client["root_certificate"] = pem.read()
        config: dict[str, Any] = {
            "region": self.region,
            # The server checks every body against x-amz-checksum-sha256 (signed), so hashing it a second
            # time for a signed payload would buy nothing: one sha256 pass per upload instead of two.
            "checksum_algorithm": "SHA256", "unsigned_payload": True,
            # AWS itself: bucket in the host name; an endpoint of ours (SeaweedFS, MinIO): path style.
            "virtual_hosted_style_request": not self.custom_endpoint}
        if self.custom_endpoint:
            config["endpoint"] = self.endpoint
        provider = None
        if static:
            config.update(access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
            if env.get("AWS_SESSION_TOKEN"):
                config["token"] = env["AWS_SESSION_TOKEN"]
        else:
            provider = _Boto3Credentials(session)
        # What a request signed here (a listing page) needs: the keys obstore was given, or the same chain.
        self._keys: Callable[[], dict[str, Any]] = provider or (lambda: {
            "access_key_id": config["access_key_id"], "secret_access_key": config["secret_access_key"],
            "token": config.get("token")})
        self._bucket_url: urllib.parse.SplitResult | None = None
        retry = {"max_retries": CLIENT_RETRIES, "retry_timeout": timedelta(seconds=1)}
        self.store: Any = obstore_store.S3Store(bucket, config=config, client_options=client, retry_config=retry,
                                                credential_provider=provider)
        self._tls = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else ssl.create_default_context()

    def presigned(self, method: str, key: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """(HTTP status, headers) of one presigned request. Connection failures raise :class:`OSError`, and an
        answer worth sending again (5xx, 429) its :class:`urllib.error.HTTPError`; any other status returns."""
        obstore = import_extra("obstore")
        url = obstore.sign(self.store, method, key, timedelta(minutes=5))
        request = urllib.request.Request(url, method=method, headers=headers or {})  # noqa: S310 - signed http(s)
        try:
            with urllib.request.urlopen(request, timeout=self.limits.read_timeout_s,  # noqa: S310 - as above
                                        context=self._tls) as response:
                return int(response.status), response.headers
        except urllib.error.HTTPError as err:
            if err.code >= 500 or err.code == 429:
                raise
            return int(err.code), err.headers

    def signed_get(self, params: dict[str, str], *, time_left: Callable[[], float],
                   max_bytes: int) -> tuple[int, bytes]:
        """(HTTP status, body) of one GET of the bucket with query ``params``, signed here (SigV4).

        ``time_left()`` (seconds) caps the read's timeout; at most ``max_bytes + 1`` bytes of the body are read
        (one more proves it too long). Connection failures and a read past ``time_left()`` raise
        :class:`OSError` (``TimeoutError``), a 5xx or 429 its :class:`urllib.error.HTTPError`."""
        base = self._bucket_base()
        query = encode_query(params)
        keys = self._keys()
        headers = signed_headers(host=base.netloc, path=base.path, query=query, region=self.region,
                                 access_key=keys["access_key_id"], secret_key=keys["secret_access_key"],
                                 token=keys.get("token"), now=datetime.now(UTC))
        request = urllib.request.Request(f"{base.scheme}://{base.netloc}{base.path}?{query}",  # noqa: S310
                                         headers={k: v for k, v in headers.items() if k != "host"})
        timeout = min(self.limits.read_timeout_s, time_left())
        if timeout <= 0:
            raise TimeoutError("the listing's time budget ran out")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._tls) as response:  # noqa: S310
                return int(response.status), _read_bounded(response, max_bytes, time_left)
        except urllib.error.HTTPError as err:
            if err.code >= 500 or err.code == 429:
                raise
            return int(err.code), _read_bounded(err, 64 << 10, time_left)

    def _bucket_base(self) -> urllib.parse.SplitResult:
        """The bucket's URL as obstore addresses it (path or virtual-hosted style), from a URL it signed."""
        if self._bucket_url is None:
            signed = import_extra("obstore").sign(self.store, "GET", "", timedelta(minutes=1))
            self._bucket_url = urllib.parse.urlsplit(signed)._replace(query="", fragment="")
        return self._bucket_url

    def boto3_client(self) -> Any:
        """A boto3 client on the same endpoint and identity, for what obstore lacks (multipart-upload listing);
        made once per connection (a client costs ~0.1 s to build, and gc asks for one under its lease each run)."""
        if self._boto3 is None:
            self._boto3 = self._new_boto3_client()
        return self._boto3

    def _new_boto3_client(self) -> Any:
        boto3 = import_extra("boto3")
        config = import_extra("botocore.config").Config(
            connect_timeout=self.limits.connect_timeout_s, read_timeout=self.limits.read_timeout_s,
            retries={"total_max_attempts": CLIENT_RETRIES + 1, "mode": "standard"})
        session = self.session or boto3.session.Session()
        return session.client("s3", config=config, region_name=self.region,
                              endpoint_url=self.endpoint if self.custom_endpoint else None)


def _read_bounded(response: Any, max_bytes: int, time_left: Callable[[], float]) -> bytes:
    """Up to ``max_bytes + 1`` bytes of a response body, in chunks, stopping when ``time_left()`` runs out
    (a server that drips bytes just under the read timeout cannot stretch one page without end)."""
    chunks, total = [], 0
    while total <= max_bytes and (chunk := response.read(min(64 << 10, max_bytes + 1 - total))):
        chunks.append(chunk)
        total += len(chunk)
        if time_left() <= 0:
            raise TimeoutError("the listing's time budget ran out while a page was read")
    return b"".join(chunks)

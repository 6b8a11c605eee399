"""What an object store's failure means: a client exception or an HTTP status as one of artifactkit's errors.

Kept apart from :mod:`~artifactkit.store.s3.objects` (the calls) because it is pure text and status logic: the
server's code is in obstore's message text (``<Code>…</Code>``, ``status code: NNN``), botocore's in its
response, a presigned request's in its status alone.
"""

from __future__ import annotations

import re
import urllib.error
from typing import Final, NoReturn

from artifactkit.errors import BucketNotFoundError, RemoteAuthError, RemoteStoreError, RemoteUnavailableError
from artifactkit.store.s3.connect import NoCredentialsError

_AUTH_CODES: Final = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403",
                                "ExpiredToken", "InvalidToken", "TokenRefreshRequired", "401"})
NOT_CREATED: Final = (409, 412)  # 409: AWS's ConditionalRequestConflict for racing conditional writes
_UNTRUSTED: Final = re.compile(r"InvalidCertificate|certificate verify failed|UnknownIssuer", re.IGNORECASE)
_UNREACHABLE: Final = re.compile(r"error sending request|timed? ?out|connection|dns error|broken pipe|reset",
                                 re.IGNORECASE)


def code_status(err: BaseException) -> tuple[str, int]:
    """The S3 error code and HTTP status in an obstore error's text ("" / 0 where it has none)."""
    text = str(err)
    code = re.search(r"<Code>([^<]+)</Code>", text)
    status = re.search(r"status code: (\d{3})", text)
    number = int(status[1]) if status else 0
    return (code[1] if code else str(number) if number else ""), number


def refused(err: BaseException, statuses: tuple[int, ...]) -> bool:
    """A precondition that did not hold (or a vanished object, if 404 is in ``statuses``): no change made."""
    if type(err).__name__ in ("AlreadyExistsError", "PreconditionError"):
        return True
    return code_status(err)[1] in statuses or (404 in statuses and isinstance(err, FileNotFoundError))


def translate(err: BaseException, *, where: str, bucket: str, endpoint: str) -> RemoteStoreError:
    """A client exception (obstore's, a presigned request's, botocore's) as one of ours, naming the object
    and the server's code."""
    if isinstance(err, RemoteStoreError):
        return err
    if isinstance(err, NoCredentialsError) or "no credentials found" in str(err):
        detail = re.search(r"no credentials found in the AWS environment/config chain(?: \(.*?\))?", str(err))
        return RemoteAuthError(f"{where}: {detail[0] if detail else 'no credentials found'}", url=where,
                               code="NoCredentials")
    response = getattr(err, "response", None)  # botocore's ClientError (the multipart-upload calls only)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    elif isinstance(err, urllib.error.HTTPError):  # a presigned request's or a listing page's 5xx, sent in vain
        code, status = "", err.code
    else:
        code, status = code_status(err)
    line = str(err).split("\n", 1)[0]
    if code == "NoSuchBucket":
        return BucketNotFoundError(f"{where}: bucket {bucket!r} does not exist", url=where, code=code)
    if code in _AUTH_CODES or type(err).__name__ in ("PermissionDeniedError", "UnauthenticatedError"):
        return RemoteAuthError(f"{where}: access refused ({code or status}: {line}); check AWS_ACCESS_KEY_ID/"
                               "AWS_SECRET_ACCESS_KEY or the profile", url=where, code=code or "AccessDenied")
    if status >= 500:
        return RemoteUnavailableError(f"{where}: server error {code} (HTTP {status})", url=where, code=code)
    if isinstance(err, FileNotFoundError):
        return RemoteStoreError(f"{where}: NoSuchKey (HTTP 404): {line}", url=where, code=code or "NoSuchKey")
    if not status and (untrusted := _UNTRUSTED.search(str(err))):
        return RemoteUnavailableError(f"{where}: the TLS certificate of {endpoint} is not trusted "
                                      f"({untrusted[0]}); "
                                      "a private CA's certificate goes in AWS_CA_BUNDLE", url=where,
                                      code="UntrustedCertificate")
    if not status and (isinstance(err, OSError) or _UNREACHABLE.search(str(err))):
        if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
            line = str(err.reason)  # not "<urlopen error ...>"
        # obstore's text holds the URL it tried; a request of our own (urllib) names no endpoint.
        at = "" if endpoint in line else f" ({endpoint})"
        return RemoteUnavailableError(f"{where}: object store unreachable or too slow{at}: {line}",
                                      url=where, code=type(err).__name__)
    return RemoteStoreError(f"{where}: {code or type(err).__name__} (HTTP {status}): {line}", url=where,
                            code=code or type(err).__name__)


def raise_for(status: int, *, where: str, bucket: str, of_bucket: bool, code: str = "") -> None:
    """Raise for the HTTP ``status`` of a request we sent ourselves (a presigned one has no body to read a
    ``code`` from; a listing page's error body gives one); 2xx passes."""
    if (status == 404 and of_bucket) or code == "NoSuchBucket":
        raise BucketNotFoundError(f"{where}: bucket {bucket!r} does not exist", url=where,
                                  code="NoSuchBucket")
    if status in (401, 403) or code in _AUTH_CODES:
        raise RemoteAuthError(f"{where}: access refused ({code or status}); check AWS_ACCESS_KEY_ID/"
                              "AWS_SECRET_ACCESS_KEY or the profile", url=where, code=code or str(status))
    if status >= 500:
        named = f"{code} " if code else ""
        raise RemoteUnavailableError(f"{where}: server error {named}(HTTP {status})", url=where,
                                     code=code or str(status))
    if status >= 300:
        raise RemoteStoreError(f"{where}: {code} (HTTP {status})" if code else f"{where}: HTTP {status}", url=where,
                               code=code or str(status))


def raise_as(err: BaseException, cause: BaseException) -> NoReturn:
    """Raise ``err`` caused by ``cause`` — or ``cause`` itself where :func:`translate` returned it unchanged (an
    error already ours, e.g. the retries' verdict): ``raise err from err`` makes its cause a cycle, which every
    walker of the chain (``traceback``, a search for the errno behind it) follows forever."""
    if err is cause:
        raise err
    raise err from cause

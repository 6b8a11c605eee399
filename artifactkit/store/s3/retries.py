"""Requests sent again: exponential backoff within a time budget, each retry counted.

A rolling restart of a gateway refuses connections for seconds; a stalled one answers nothing. Three attempts
within 0.4 s (what the client did alone before) failed every operation in flight on a 10 s restart, where
``rclone copy`` rides it out. So every request goes through :meth:`Retrier.call`: a failure that says nothing
of the request (no answer, a dropped or refused connection, 5xx, 429 — :func:`is_transient`) is sent again
after 0.1 s, doubling to at most 2 s (a restarted endpoint is found within 2 s of its return), with jitter so
the requests that failed together do not return together, until ``ARTIFACTKIT_S3_RETRY_S`` seconds (default
30) have passed since the request first failed; then the error says that the budget ran out and names the
setting. A 4xx is an answer and never sent again.

Only requests that are safe to send twice come here, and every one the bucket sends is, by construction:
GET, HEAD and listings read; a blob's PUT writes the same bytes under the same name; DELETE of a gone key
succeeds. The conditional writes are safe because of what follows a refusal, not because they are idempotent:
a ``PUT If-None-Match: *`` whose first attempt landed but whose answer was lost gets 412 on the retry, and
``Bucket.create`` reads the object back and claims it only if its body *and* metadata (a nonce of the writer)
are its own, so a retry neither turns someone else's version into our success nor our landed claim into a
second version; ``Bucket.replace`` (``If-Match``) reads back likewise (a lease body is unique by its nonce and
counter). A retry never stretches a lease: the lease is checked before every visible change, as before.

The client library's own retries are off (:data:`~artifactkit.store.s3.connect.CLIENT_RETRIES`): it would
retry uncounted, and outside this budget.

Calls nest (a whole blob fetched again when its body broke off midway, around the GET that opened it): only
the outermost call of a thread sends again, so budgets never multiply.
"""

from __future__ import annotations

import contextlib
import errno
import random
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

from artifactkit.errors import RemoteStoreError, RemoteUnavailableError
from artifactkit.manifest.limits import positive_setting, show
from artifactkit.store.s3.failures import code_status, raise_as, translate

RETRY_SETTING: Final = "ARTIFACTKIT_S3_RETRY_S"
#: Seconds from a request's first failure during which it is sent again (:data:`RETRY_SETTING`): a 10 s restart
#: fits three times over, and a dead endpoint is still named within a minute.
DEFAULT_RETRY_S: Final = 30
FIRST_DELAY_S: Final = 0.1
MAX_DELAY_S: Final = 2.0
_THROTTLED: Final = frozenset({"SlowDown", "TooManyRequests", "RequestTimeout"})

T = TypeVar("T")


def retry_budget_s() -> int:
    """:data:`DEFAULT_RETRY_S`, unless ``ARTIFACTKIT_S3_RETRY_S`` is a positive whole number of seconds (an empty
    value counts as unset); any other value is refused by name, never the default."""
    def refused(text: str) -> ValueError:
        return ValueError(f"{RETRY_SETTING}={show(text)} is not a number of seconds: give a positive whole number "
                          f"(the default is {DEFAULT_RETRY_S})")
    return positive_setting(RETRY_SETTING, DEFAULT_RETRY_S, refused)


#: Errnos of this machine's own files (a download's destination, a publish's staging): never the endpoint's, so
#: never sent again — a full disk stays full, and 30 s of retries would only delay its clear error.
LOCAL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM,
                                 errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP,
                                 errno.EMFILE, errno.ENFILE})


def is_transient(err: BaseException) -> bool:
    """A failure that says nothing about the request itself: no answer, a dropped or refused connection, a 5xx
    or a throttle (429, ``SlowDown``). A certificate nobody vouches for stays wrong on every attempt, and a
    failure of a local file (:data:`LOCAL_ERRNOS`) is ours, not the endpoint's."""
    if isinstance(err, OSError) and err.errno in LOCAL_ERRNOS:
        return False
    if isinstance(err, urllib.error.HTTPError):
        return err.code >= 500 or err.code == 429
    if any(cls.__name__ == "HTTPClientError" and cls.__module__.startswith("botocore") for cls in type(err).__mro__):
        return True  # botocore's connection, read-timeout and dropped-connection family
    if not isinstance(err, RemoteStoreError):
        code, status = code_status(err)
        if status == 429 or code in _THROTTLED:
            return True
        err = translate(err, where="", bucket="", endpoint="")
    return isinstance(err, RemoteUnavailableError) and err.context.get("code") != "UntrustedCertificate"


class Retrier:
    """One bucket's retries: the budget, and how many requests were sent again (:attr:`count`, all threads)."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.count = 0
        self._lock = threading.Lock()
        self._local = threading.local()  # .inside: an enclosing call of this thread owns the retries

    def call(self, request: Callable[[], T], translate: Callable[[BaseException], RemoteStoreError], *,
             transient: Callable[[BaseException], bool] = is_transient, budget_s: float | None = None,
             stop: threading.Event | None = None) -> T:
        """``request()``, sent again while it fails transiently and the budget lasts (``budget_s``: a smaller one
        of the caller's; ``stop``: set, no more attempts). Past the budget, ``translate(err)`` with the attempts
        and the setting in its message; any other failure is raised as it came."""
        if getattr(self._local, "inside", False):
            return request()
        self._local.inside = True
        try:
            return self._attempts(request, translate, transient, self.budget_s if budget_s is None else budget_s,
                                  stop)
        finally:
            self._local.inside = False

    @contextlib.contextmanager
    def once(self) -> Iterator[None]:
        """Requests inside are sent once (a probe that asks why the requests before it failed)."""
        was = getattr(self._local, "inside", False)
        self._local.inside = True
        try:
            yield
        finally:
            self._local.inside = was

    def _attempts(self, request: Callable[[], T], translate: Callable[[BaseException], RemoteStoreError],
                  transient: Callable[[BaseException], bool], budget_s: float, stop: threading.Event | None) -> T:
        first_failed, attempt = 0.0, 0
        while True:
            try:
                return request()
            except Exception as err:
                if not transient(err):
                    raise
                now = time.monotonic()
                first_failed = first_failed or now
                delay = min(FIRST_DELAY_S * 2 ** attempt, MAX_DELAY_S) * random.uniform(0.5, 1.0)  # noqa: S311
                if now + delay - first_failed > budget_s or (stop is not None and stop.is_set()):
                    gave_up = self._gave_up(translate(err), attempt + 1, now - first_failed, budget_s)
                    raise_as(gave_up, err)
                if stop is None:
                    time.sleep(delay)
                elif stop.wait(delay):
                    raise_as(translate(err), err)
            attempt += 1
            with self._lock:
                self.count += 1

    def _gave_up(self, err: RemoteStoreError, attempts: int, spent_s: float, budget_s: float) -> RemoteStoreError:
        if attempts == 1 and budget_s == 0:
            return err
        setting = f"{RETRY_SETTING}={budget_s:g}" if budget_s == self.budget_s else f"a budget of {budget_s:g} s"
        message = f"{err.message}; sent {attempts} times over {spent_s:.1f} s, until the retry budget ran out " \
                  f"({setting})"
        return type(err)(message, **err.context)


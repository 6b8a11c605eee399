"""The whole lock protocol of a shared bucket: leases made of objects, refreshed while alive.

A server we do not run cannot hold an ``flock`` for us, so locks are objects (restic's idea, made
stricter with conditional writes):

==================================  ==========================================================
``locks/publish/<token>``           one per running publish (shared); created, then ``locks/gc``
                                    checked
``locks/gc``                        one running gc or forget (exclusive): created with
                                    ``If-None-Match: *``, then every ``locks/publish/*`` checked
``locks/download/<name>/<v>/<tok>`` one per running download of ``name@v`` (shared); created,
                                    then ``locks/forget`` checked
``locks/forget``                    one running forget (exclusive, under ``locks/gc``): created,
                                    then the downloads of the names it removes checked
==================================  ==========================================================

Both sides *write, then look* for the other: with S3's read-after-write consistency at least one of
two racers sees the other, so gc never sweeps while a live publisher holds its lease. A holder
rewrites its lease every ``ttl_s / 4`` with ``If-Match`` (a counter in the body changes the ETag);
a 412 means the lease was broken: the holder stops. A lease is *stale* when the server's clock says
it was last written more than ``ttl_s`` ago; a stale lease is broken with ``If-Match`` on the ETag
judged stale, so one refreshed meanwhile survives. A holder whose last successful refresh is older
than ``ttl_s / 2`` (its own monotonic clock) refuses to act — before a manifest commit and before
each gc delete — so it stops well before anyone may call it stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from functools import partial

import attrs

from artifactkit.errors import LeaseLostError, RemoteStoreError, RemoteUnavailableError, StoreBusyError
from artifactkit.store.s3.objects import Bucket, ObjectInfo

GC_KEY = "locks/gc"
PUBLISH_DIR = "locks/publish/"
FORGET_KEY = "locks/forget"
DOWNLOAD_DIR = "locks/download/"
_POLL_S = 0.2  # how often a waiter looks again: far below any ttl, far above a request's latency
#: Publish leases one listing may show: one per running publish, and no bucket sees ten thousand at once; more
#: is a broken or hostile server.
MAX_LEASES = 10_000
#: Stale leases one look breaks (a DELETE each): a listing of thousands of fake stale leases must not turn into
#: thousands of requests; crashed publishers' leases that pile up are cleared a hundred a look.
BREAKS_PER_LOOK = 100


@attrs.frozen
class LeasePolicy:
    """Times of the protocol; every client of one bucket must use the same ``ttl_s``.

    ``grace_s``: gc never deletes an unreferenced blob younger than this (server clock) — the
    second line of defence for a publisher stalled past its lease (a stopped VM, a long GC pause).
    """

    ttl_s: float = 60.0
    grace_s: float = 3600.0
    wait_s: float = 120.0


def is_stale(info: ObjectInfo, now: datetime, ttl_s: float) -> bool:
    return (now - info.last_modified).total_seconds() > ttl_s


class Lease:
    """A lease we hold: refreshed by a daemon thread until :meth:`release`."""

    def __init__(self, bucket: Bucket, key: str, etag: str, body: dict[str, object], ttl_s: float) -> None:
        self.bucket, self.key, self.ttl_s = bucket, key, ttl_s
        self._etag, self._body = etag, body
        self._last_ok = time.monotonic()
        self._lost = ""
        self._unreachable: RemoteUnavailableError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh_loop, name=f"artifactkit-lease-{key}", daemon=True)
        self._thread.start()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            self._body["counter"] = int(str(self._body["counter"])) + 1
            try:
                # Sent again until the next refresh is due (a release stops it at once): an outage shorter
                # than that costs this lease nothing.
                etag = self.bucket.retrying(partial(self.bucket.replace, self.key, _encode(self._body), self._etag),
                                            self.key, budget_s=self.ttl_s / 4, stop=self._stop)
            except Exception:  # noqa: BLE001, S112 - a failed refresh shows as an old _last_ok in check()
                continue
            if etag is None:
                self._lost = "it was broken by another client (judged stale)"
                return
            self._etag, self._last_ok = etag, time.monotonic()

    def check(self) -> None:
        """Raise :class:`LeaseLostError` unless the lease is certainly still ours for a while, or
        :class:`RemoteUnavailableError` naming the endpoint if that is because the server is gone."""
        age = time.monotonic() - self._last_ok
        if not self._lost and age > self.ttl_s / 2:
            self._lost = f"it was last refreshed {age:.1f} s ago (ttl {self.ttl_s} s)"
            self._unreachable = self._probe(age)
        if self._unreachable is not None:
            raise self._unreachable
        if self._lost:
            raise LeaseLostError(f"{self.bucket.url(self.key)}: lease lost: {self._lost}; stopped before "
                                 "changing anything visible", url=self.bucket.url(self.key), code="LeaseLost")

    def _probe(self, age: float) -> RemoteUnavailableError | None:
        """Why the refreshes stopped, if it is a dead or unreachable server: one request, only when they have.

        A server that went away surfaced as "lease lost" (its refreshes fail quietly, by design), which
        sent people looking for a competing client instead of at the endpoint.
        """
        try:
            with self.bucket.retrier.once():  # the refreshes were sent again already: one look says why
                self.bucket.check_bucket()
        except RemoteUnavailableError as err:
            endpoint = self.bucket.endpoint
            return RemoteUnavailableError(
                f"{endpoint}: the object store stopped answering: lease {self.bucket.url(self.key)} could not be "
                f"refreshed for {age:.1f} s (ttl {self.ttl_s} s); stopped before changing anything visible ({err})",
                url=self.bucket.url(self.key), code=getattr(err, "code", ""), endpoint=endpoint)
        except RemoteStoreError:
            return None  # it answers (with an error of another kind): the lease itself is what was lost
        return None

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if not self._lost:
            self.bucket.delete_if_match(self.key, self._etag)


def _encode(body: dict[str, object]) -> bytes:
    return json.dumps(body, sort_keys=True).encode()


def _body(kind: str, ttl_s: float) -> dict[str, object]:
    return {"kind": kind, "host": socket.gethostname(), "pid": os.getpid(), "ttl_s": ttl_s, "counter": 0,
            "nonce": secrets.token_hex(8)}


def _break_if_stale(bucket: Bucket, info: ObjectInfo, now: datetime, ttl_s: float) -> bool:
    """Delete a stale lease (only the version judged stale); True if it was stale."""
    if not is_stale(info, now, ttl_s):
        return False
    bucket.delete_if_match(info.key, info.etag)
    return True


def _wait_or_give_up(deadline: float, why: str, bucket: Bucket) -> None:
    """Every turn of a waiting loop comes here, also one that could try again at once: a server that answers
    every try the same way (refuses each new lease as existing, shows a lock that is gone when looked at)
    must neither keep a loop turning past ``deadline`` nor be asked as fast as it answers."""
    if time.monotonic() >= deadline:
        raise StoreBusyError(f"{bucket.url()}: {why}; gave up waiting", url=bucket.url(), code="Busy")
    time.sleep(_POLL_S)


@contextmanager
def _released(lease: Lease) -> Iterator[None]:
    """Release ``lease`` at exit; when the body failed, a failing release (the server is gone) must not
    replace the body's error: that one says what happened, and a lease left behind goes stale."""
    try:
        yield
    except BaseException:
        # One attempt: the body's failure is often the endpoint's, and its retry budget is spent already.
        with contextlib.suppress(RemoteStoreError), lease.bucket.retrier.once():
            lease.release()
        raise
    lease.release()


@contextmanager
def _shared_lease(bucket: Bucket, policy: LeasePolicy, kind: str, under: str, exclusive: str) -> Iterator[Lease]:
    """Hold a shared lease ``<under><token>``: written, *then* ``exclusive`` looked at; while a live holder has
    that, step aside and wait (up to ``wait_s``)."""
    deadline = time.monotonic() + policy.wait_s
    while True:
        key = f"{under}{secrets.token_hex(12)}"
        body = _body(kind, policy.ttl_s)
        etag = bucket.create(key, _encode(body))
        if etag is None:  # a 96-bit token collided (or the server refuses every new key): draw another
            _wait_or_give_up(deadline, f"the server refused every new {kind} lease as existing", bucket)
            continue
        holder = bucket.head(exclusive)
        if holder is None:
            break
        bucket.delete_if_match(key, etag)  # step aside while it runs
        if not _break_if_stale(bucket, holder, bucket.server_now(), policy.ttl_s):
            _wait_or_give_up(deadline, f"{exclusive.removeprefix('locks/')} holds {exclusive}", bucket)
    lease = Lease(bucket, key, etag, body, policy.ttl_s)
    with _released(lease):
        yield lease


def publish_lease(bucket: Bucket, policy: LeasePolicy) -> AbstractContextManager[Lease]:
    """Hold a shared lease for a publish: waits (up to ``wait_s``) while a live gc holds ``locks/gc``."""
    return _shared_lease(bucket, policy, "publish", PUBLISH_DIR, GC_KEY)


def download_lease(bucket: Bucket, policy: LeasePolicy, name: str, version: int) -> AbstractContextManager[Lease]:
    """Hold ``name@version`` for a download: waits (up to ``wait_s``) while a live forget holds ``locks/forget``."""
    return _shared_lease(bucket, policy, "download", f"{DOWNLOAD_DIR}{name}/{version}/", FORGET_KEY)


def _live(bucket: Bucket, under: str, ttl_s: float, *, break_stale: bool) -> list[str]:
    """Keys of leases under ``under`` that are not stale (if ``break_stale``, the first :data:`BREAKS_PER_LOOK`
    stale ones are broken: the others count as stale all the same, and the next look breaks them)."""
    now = bucket.server_now()
    live, broken = [], 0
    for info in bucket.objects_under(under, max_keys=MAX_LEASES):
        if not is_stale(info, now, ttl_s):
            live.append(info.key)
        elif break_stale and broken < BREAKS_PER_LOOK:
            bucket.delete_if_match(info.key, info.etag)
            broken += 1
    return live


def live_publishers(bucket: Bucket, ttl_s: float, *, break_stale: bool) -> list[str]:
    """Keys of publish leases that are not stale (stale ones are broken if ``break_stale``)."""
    return _live(bucket, PUBLISH_DIR, ttl_s, break_stale=break_stale)


def live_downloads(bucket: Bucket, ttl_s: float, name: str) -> set[int]:
    """The versions of ``name`` a live download lease holds (stale ones, killed downloads', are broken)."""
    under = f"{DOWNLOAD_DIR}{name}/"
    return {int(key[len(under):].partition("/")[0])
            for key in _live(bucket, under, ttl_s, break_stale=True) if key[len(under):].partition("/")[0].isdigit()}


@contextmanager
def _exclusive_lease(bucket: Bucket, policy: LeasePolicy, kind: str, key: str, deadline: float) -> Iterator[Lease]:
    """Hold ``key`` alone: created with ``If-None-Match: *``; a stale holder's is broken, a live one waited for."""
    while True:
        body = _body(kind, policy.ttl_s)
        etag = bucket.create(key, _encode(body))
        if etag is not None:
            break
        held = bucket.head(key)
        if held is None or _break_if_stale(bucket, held, bucket.server_now(), policy.ttl_s):
            # Gone when looked at, or stale and broken: try again, but not past the deadline.
            _wait_or_give_up(deadline, f"{key} was refused as existing and then was not there (the server refused "
                             f"every new {kind} lease)" if held is None else f"{key} went stale and was broken, "
                             "again and again", bucket)
            continue
        _wait_or_give_up(deadline, f"another {'gc or forget' if key == GC_KEY else kind} holds {key}", bucket)
    lease = Lease(bucket, key, etag, body, policy.ttl_s)
    with _released(lease):
        yield lease


@contextmanager
def forget_lease(bucket: Bucket, policy: LeasePolicy) -> Iterator[Lease]:
    """Hold ``locks/forget`` (taken under ``locks/gc``): downloads starting meanwhile wait, and the ones that
    wrote their leases before it are listed by the forget (:func:`live_downloads`)."""
    with _exclusive_lease(bucket, policy, "forget", FORGET_KEY, time.monotonic() + policy.wait_s) as lease:
        yield lease


@contextmanager
def gc_lease(bucket: Bucket, policy: LeasePolicy, kind: str = "gc") -> Iterator[Lease]:
    """Hold ``locks/gc`` once no live publisher remains (waits up to ``wait_s`` in all); ``kind``: who holds it
    (gc, or a forget, which must exclude publishers' claims too).

    gc keeps ``locks/gc`` while it waits for publishes in flight to finish, so new publishers step
    aside meanwhile: the turnstile that keeps a steady stream of overlapping publishes from starving gc.
    """
    deadline = time.monotonic() + policy.wait_s
    with _exclusive_lease(bucket, policy, kind, GC_KEY, deadline) as lease:
        while live := live_publishers(bucket, policy.ttl_s, break_stale=True):
            _wait_or_give_up(deadline, f"{len(live)} publish(es) still in progress", bucket)
        lease.check()
        yield lease

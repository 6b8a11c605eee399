"""Listings that end: a bucket's keys page by page, each page checked, every listing bounded.

obstore lists a prefix as one stream that follows the server's continuation tokens inside a single call until
it holds a chunk of keys: a server whose pages say "more" and bring no key (or the same key again, forever)
keeps that call busy for as long as it likes, and nothing of ours runs between its pages (measured: 200 such
pages, one ``next()``). So the pages are requested here, one signed GET each (:mod:`~artifactkit.store.s3.
sigv4`), and a listing stops with :class:`~artifactkit.errors.ListingLimitError` at the first of:

==================  =================================  ================================================
bound               value                              why this value
==================  =================================  ================================================
keys                20,000,000 per listing, or         twice the 10 M blobs a large store may hold;
                    ``ARTIFACTKIT_MAX_LISTED_KEYS``    verify keeps 144 bytes a key (measured, a
                                                       dict of 1 M): 2.9 GB at the bound
advance             every key after the one before     S3 lists in UTF-8 binary order, SeaweedFS in
                    (in one of two orders), and no     path-segment order (``a/1`` before ``a-b/1``):
                    token twice in a row               a repeated page cannot follow either
pages without keys  100 in a row                       an honest server may send a few; a token that
                                                       always continues sends them forever
time                120 s plus 1 ms per key listed,    three 30 s attempts of a page fit the start; 1 ms
                    counting only time in requests    a key is 1 s a page of 1,000
page bytes          16 MiB                             1,000 keys of 1,024 bytes, each ``&`` escaped
==================  =================================  ================================================

A listing that looks honest (fresh keys, in order, at a steady pace) is indistinguishable from a big store up
to the key bound: that is the most one can cost (docs/s3.md has the figures).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime
from typing import Final

import attrs

from artifactkit.errors import ListingLimitError, RemoteStoreError
from artifactkit.manifest.limits import positive_setting, show

#: The default of :func:`max_listed_keys`.
MAX_LISTED_KEYS: Final = 20_000_000
LISTED_KEYS_SETTING: Final = "ARTIFACTKIT_MAX_LISTED_KEYS"
#: Keys asked for per page (S3's own maximum): a page with more is not an S3 answer.
PAGE_KEYS: Final = 1000


@attrs.frozen
class ListingBounds:
    """The bounds of one listing (the module's table); ``max_keys`` None: :func:`max_listed_keys`, the
    setting; a listing of what an honest store holds few of (leases) passes a smaller bound of its own."""

    max_keys: int | None = None
    keyless_pages: int = 100
    base_s: float = 120.0
    s_per_key: float = 0.001
    page_bytes: int = 16 << 20


def max_listed_keys() -> int:
    """:data:`MAX_LISTED_KEYS`, unless ``ARTIFACTKIT_MAX_LISTED_KEYS`` is set (an empty value counts as unset)
    to a positive whole number in ASCII digits; any other value is refused by name, never the default."""
    def refused(text: str) -> ListingLimitError:
        return ListingLimitError(
            f"{LISTED_KEYS_SETTING}={show(text)} is not a number of keys: give a positive whole number (the "
            f"default is {MAX_LISTED_KEYS})", url="", code="BadSetting", limit="keys", setting=LISTED_KEYS_SETTING)
    return positive_setting(LISTED_KEYS_SETTING, MAX_LISTED_KEYS, refused)


class ListingGuard:
    """One listing's checks, page by page: :meth:`page` and :meth:`charge` raise at the first bound crossed."""

    def __init__(self, where: str, bounds: ListingBounds, *, what: str = "listing") -> None:
        self.where, self.bounds, self.what = where, bounds, what
        # A bound of the caller's own (a listing of leases) is no setting; the default is one.
        self.setting = bounds.max_keys is None
        self.max_keys = bounds.max_keys or max_listed_keys()
        self.keys = self.pages = self._keyless = 0
        self.spent_s = 0.0
        self._last: str | None = None
        self._last_parts: list[str] = []
        self._binary = self._by_segment = True  # still ascending in that order
        self._token: str | None = None
        self._ids: set[str] = set()  # upload ids seen under the current key (a multipart-upload listing)

    def time_left(self) -> float:
        return self.bounds.base_s + self.keys * self.bounds.s_per_key - self.spent_s

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` spent waiting on a request of this listing against its time budget."""
        self.spent_s += seconds
        if self.time_left() < 0:
            self._stop("time", f"took {self.spent_s:.1f} s in requests for {self.keys:,} keys, over its time "
                               f"budget ({self.bounds.base_s:g} s plus {self.bounds.s_per_key * 1000:g} ms per key "
                               "listed)", "a server this slow is broken or hostile")

    def page(self, keys: Sequence[str], token: str | None, *, ids: Sequence[str] | None = None) -> None:
        """Check one page: its ``keys`` in order, and the ``token`` it continues with (None: the last page).

        ``ids`` (a multipart-upload listing: one key may have many uploads) allows a key to repeat, once per
        upload id; a listing of objects has every key once.
        """
        self.pages += 1
        for index, key in enumerate(keys):
            self._advance(key, None if ids is None else ids[index])
        self.keys += len(keys)
        if self.keys > self.max_keys:
            self._stop("keys", f"passed {self.max_keys:,} keys, the most one listing may bring",
                       f"{LISTED_KEYS_SETTING} raises it for a bigger store" if self.setting else
                       "more than an honest store holds there: the server is broken or hostile")
        self._keyless = 0 if keys else self._keyless + 1
        if token is not None and self._keyless >= self.bounds.keyless_pages:
            self._stop("empty pages", f"brought {self._keyless} pages in a row without a key, each saying there "
                                      "is more")
        if token is not None and token == self._token:
            self._stop("advance", f"does not advance: the server sent the continuation token {show(token)} twice "
                                  "in a row")
        self._token = token

    def _advance(self, key: str, upload: str | None) -> None:
        last = self._last
        if last is not None:
            parts = key.split("/")
            same = key == last and upload is not None
            # Python compares str by code point, which is UTF-8's byte order (S3's); SeaweedFS walks its
            # directories, so a listing may keep either order, never switch between them.
            self._binary = self._binary and (key > last or same)
            self._by_segment = self._by_segment and (parts > self._last_parts or same)
            if not (self._binary or self._by_segment):
                self._stop("advance", f"does not advance: key {show(key)} followed {show(last)} (a listing holds "
                                      "each key once, in ascending order: a page that repeats or goes back "
                                      "does not)")
            self._last_parts = parts
            if not same:
                self._ids.clear()
        else:
            self._last_parts = key.split("/")
        if upload is not None:
            if upload in self._ids:
                self._stop("advance", f"does not advance: upload {show(upload)} of {show(key)} came twice")
            self._ids.add(upload)
        self._last = key

    def _stop(self, limit: str, problem: str, verdict: str = "the server is broken or hostile") -> None:
        raise ListingLimitError(
            f"{self.where}: the {self.what} {problem}; stopped after {self.pages:,} page(s) and {self.keys:,} "
            f"key(s) ({verdict})", url=self.where, code="ListingLimit", limit=limit, pages=self.pages,
            keys=self.keys, setting=LISTED_KEYS_SETTING if limit == "keys" and self.setting else None)


@attrs.frozen
class Listed:
    """One object of a page: its whole key, size, ETag (as sent, quoted) and time of writing."""

    key: str
    size: int
    etag: str
    last_modified: datetime


def parse_objects(body: bytes, where: str) -> tuple[list[Listed], bool, str | None]:
    """A ListObjectsV2 page: its objects, whether it says there is more, and its continuation token."""
    # S3 sends no DTD; refusing one keeps entity expansion out of the parse whatever the expat version.
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise _malformed(where, "it declares a DTD")
    try:
        root = ET.fromstring(body)  # noqa: S314 - bounded in size, no DTD (above)
    except ET.ParseError as err:
        raise _malformed(where, f"not XML: {err}") from err
    if _local(root.tag) != "ListBucketResult":
        raise _malformed(where, f"its root is {show(_local(root.tag))}")
    ns = root.tag[:-len("ListBucketResult")]  # "{http://s3.amazonaws.com/doc/2006-03-01/}" or none
    found = [_object(element, ns, where) for element in root.iterfind(f"{ns}Contents")]
    truncated = (root.findtext(f"{ns}IsTruncated") or "").strip() == "true"
    token = root.findtext(f"{ns}NextContinuationToken")
    if truncated and not token:
        raise _malformed(where, "it says there is more but gives no continuation token")
    return found, truncated, token if truncated else None


def _object(element: ET.Element, ns: str, where: str) -> Listed:
    # findtext by the qualified name runs in C: a third of the time of a dict of every child (measured).
    key, size, modified = (element.findtext(f"{ns}{name}") for name in ("Key", "Size", "LastModified"))
    if key is None or size is None or modified is None:
        raise _malformed(where, "an object without a Key, Size and LastModified")
    try:
        listed = Listed(key, int(size), element.findtext(f"{ns}ETag") or "", datetime.fromisoformat(modified))
    except ValueError as err:
        raise _malformed(where, f"object {show(key)}: {err}") from err
    if listed.size < 0 or listed.last_modified.tzinfo is None:
        raise _malformed(where, f"object {show(key)} has a negative size or a time without a zone")
    return listed


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _malformed(where: str, why: str) -> RemoteStoreError:
    return RemoteStoreError(f"{where}: the server's listing page is not an S3 ListObjectsV2 answer: {why}",
                            url=where, code="MalformedListing")


def timed(guard: ListingGuard, started: float) -> None:
    """Charge the time since ``started`` (``time.monotonic()``) to ``guard``."""
    guard.charge(time.monotonic() - started)

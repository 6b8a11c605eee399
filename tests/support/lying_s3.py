"""An S3 endpoint whose listings never end: a loopback proxy in front of the test's real SeaweedFS.

Every request is forwarded as it came — same method, path, query, headers and ``Host`` — so a request signed
for this endpoint verifies upstream, and publish, GET and HEAD behave as the real server does. Only the
listings lie, as ``lie`` says:

===========  ====================================================================================================
``repeat``   the real first page, marked truncated, and the same page again for its token, forever (the token
             always continues: the issue's endless listing)
``advance``  the real first page, then pages of 1,000 fresh keys that sort after everything before, each with a
             new token (a listing that advances but never ends)
``empty``    the real first page, then pages without a key, each with a new token
``slow``     as ``advance``, with ``delay_s`` before each lying page (a server slow enough to stay under every
             request timeout)
``refuse``   no listing lies: every conditional create (``If-None-Match: *``) answers 412, as if the key existed
``endless``  no listing lies: a GET of a blob (not of a tree object) sends its bytes and then more, under a
             length of a TiB more
===========  ====================================================================================================

``uploads=True`` makes ``ListMultipartUploads`` lie the same way (``repeat`` and ``advance``) instead of
``ListObjectsV2``. The proxy stops lying by itself after ``max_pages`` lying pages or ``max_s`` seconds from
the first lie (then it answers a last, empty page), so a client with no bound of its own finishes — with a
wrong answer — instead of hanging the suite: a test against it fails rather than hangs on code without the
bounds. It listens on 127.0.0.1 on a free port and stops when its ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from xml.sax.saxutils import escape

from artifactkit.manifest.tree_format import OBJECT_STARTS

LIES: Final = ("repeat", "advance", "empty", "slow", "refuse", "endless")
_NS: Final = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
_HOP: Final = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class LyingS3:
    """What the test reads back: the proxy's URL, and how many lying pages it served."""

    def __init__(self, upstream: str, lie: str, *, uploads: bool, max_pages: int, max_s: float,
                 delay_s: float) -> None:
        assert lie in LIES, lie
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.lie, self.uploads, self.max_pages, self.max_s, self.delay_s = lie, uploads, max_pages, max_s, delay_s
        self.lying_pages = 0
        self.first_lie: float | None = None
        self.url = ""
        self._lock = threading.Lock()
        self.first_pages: dict[str, bytes] = {}  # the real first page of each listing, by prefix

    def still_lying(self) -> bool:
        with self._lock:
            if self.first_lie is None:
                self.first_lie = time.monotonic()
            if self.lying_pages >= self.max_pages or time.monotonic() - self.first_lie > self.max_s:
                return False
            self.lying_pages += 1
            return True


def _objects_page(prefix: str, keys: list[str], token: str | None) -> bytes:
    contents = "".join(
        f"<Contents><Key>{escape(key)}</Key><LastModified>2001-01-01T00:00:00.000Z</LastModified>"
        f"<ETag>&quot;lie&quot;</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
        for key in keys)
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{escape(token)}</NextContinuationToken>" \
        if token is not None else "<IsTruncated>false</IsTruncated>"
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult {_NS}><Name>b</Name>'
            f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"{more}{contents}</ListBucketResult>").encode()


def _uploads_page(prefix: str, keys: list[str], marker: str | None) -> bytes:
    uploads = "".join(f"<Upload><Key>{escape(key)}</Key><UploadId>{escape(key)}-id</UploadId>"
                      "<Initiated>2001-01-01T00:00:00.000Z</Initiated></Upload>" for key in keys)
    more = (f"<IsTruncated>true</IsTruncated><NextKeyMarker>{escape(marker)}</NextKeyMarker>"
            f"<NextUploadIdMarker>{escape(marker)}-id</NextUploadIdMarker>") if marker is not None \
        else "<IsTruncated>false</IsTruncated>"
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult {_NS}><Bucket>b</Bucket>'
            f"<Prefix>{escape(prefix)}</Prefix><MaxUploads>1000</MaxUploads>{more}{uploads}"
            "</ListMultipartUploadsResult>").encode()


def _truncated(body: bytes, token: str) -> bytes:
    """A real ListObjectsV2 page marked truncated, continuing with ``token``."""
    text = body.decode()
    for tag in ("IsTruncated", "NextContinuationToken"):
        start, end = text.find(f"<{tag}>"), text.find(f"</{tag}>")
        if start >= 0:
            text = text[:start] + text[end + len(tag) + 3:]
    head, _, tail = text.partition("<Contents>")
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
    return (head.replace("</ListBucketResult>", "") + more + ("<Contents>" + tail if tail else "</ListBucketResult>")
            ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a test's output is not the proxy's access log

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        lying: LyingS3 = self.server.lying
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        body = self._body()
        if (lying.lie == "refuse" and self.command == "PUT" and self.headers.get("If-None-Match") == "*"
                and lying.still_lying()):
            self._send(412, b"<Error><Code>PreconditionFailed</Code></Error>", "application/xml")
            return
        listing = self.command == "GET" and ("uploads" in query if lying.uploads else query.get("list-type") == ["2"])
        if lying.lie == "endless" and self.command == "GET" and not listing and "/blobs/" in self.path:
            status, headers, real = self._forward(body)
            if not real.startswith(OBJECT_STARTS):
                self._endless(lying, real)
                return
            # A tree object is sent as it is: one claiming a TiB is refused by its length before a byte is read
            # (tests/store/faults/test_hostile_trees.py), and the lie is aimed at the reads of content.
            self._send(status, real, headers.get("Content-Type", "application/octet-stream"), headers)
            return
        if listing and lying.lie not in ("refuse", "endless"):
            prefix = query.get("prefix", [""])[0]
            marker = query.get("key-marker" if lying.uploads else "continuation-token", [None])[0]
            if marker is not None:
                self._lie(lying, prefix, marker)
                return
        status, headers, answer = self._forward(body)
        if listing and lying.lie not in ("refuse", "endless") and status == 200:
            lying.first_pages[query.get("prefix", [""])[0]] = answer
            if lying.uploads:
                # The real first page is empty here (no test leaves an upload): the lie starts at once.
                start = "again" if lying.lie == "repeat" else f"{query.get('prefix', [''])[0]}~lie/{0:012}"
                answer = _uploads_page(query.get("prefix", [""])[0], [], start)
            else:
                answer = _truncated(answer, "again" if lying.lie == "repeat" else "lie-0")
        self._send(status, answer, headers.get("Content-Type", "application/xml"), headers)

    def _lie(self, lying: LyingS3, prefix: str, marker: str) -> None:
        page = _uploads_page if lying.uploads else _objects_page
        if not lying.still_lying():
            self._send(200, page(prefix, [], None), "application/xml")
            return
        if lying.lie == "slow":
            time.sleep(lying.delay_s)
        number = int(found[1]) if (found := re.search(r"(\d+)$", marker)) else 0
        if lying.lie == "repeat" and lying.uploads:
            answer = _uploads_page(prefix, [f"{prefix}~lie/0"], "again")
        elif lying.lie == "repeat":
            answer = _truncated(lying.first_pages.get(prefix, _objects_page(prefix, [], None)), "again")
        elif lying.lie == "empty":
            answer = page(prefix, [], f"lie-{number + 1}")
        elif lying.uploads:  # advance, slow: the marker is the last key; 1,000 more after it
            keys = [f"{prefix}~lie/{n:012}" for n in range(number + 1, number + 1001)]
            answer = page(prefix, keys, keys[-1])
        else:  # "~" sorts after letters, digits and "/": every key is past every key before it
            keys = [f"{prefix}~lie/{n:012}" for n in range(number * 1000, number * 1000 + 1000)]
            answer = page(prefix, keys, f"lie-{number + 1}")
        self._send(200, answer, "application/xml")

    def _endless(self, lying: LyingS3, real: bytes) -> None:
        """The blob's bytes, then 64 KiB chunks for as long as the proxy lies, under a length of a TiB more
        (obstore refuses a body without a length); then the connection is dropped."""
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(real) + (1 << 40)))
        self.end_headers()
        chunk = b"\0" * (64 << 10)
        with contextlib.suppress(OSError):  # the client stopped reading: what a bounded reader does
            self.wfile.write(real)
            while lying.still_lying():
                self.wfile.write(chunk)
        self.close_connection = True

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes) -> tuple[int, Any, bytes]:
        lying: LyingS3 = self.server.lying
        upstream = http.client.HTTPConnection(*lying.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Content-Length"] = str(len(body))  # the Host header is kept: the signature covers it
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            return response.status, response.headers, response.read()
        finally:
            upstream.close()

    def _send(self, status: int, body: bytes, content_type: str, headers: Any = None) -> None:
        self.send_response(status)
        for key, value in (headers.items() if headers is not None else ()):
            if key.lower() not in _HOP and key.lower() not in ("content-type", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        if self.command == "HEAD" and headers is not None:
            self.send_header("Content-Length", headers.get("Content-Length", "0"))
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-answer (a bounded reader does) is no error of the test's


@contextlib.contextmanager
def lying_s3(upstream: str, lie: str, *, uploads: bool = False, max_pages: int = 3000, max_s: float = 30.0,
             delay_s: float = 0.0) -> Iterator[LyingS3]:
    """A :class:`LyingS3` in front of ``upstream`` (an ``http://`` URL), serving until the block ends."""
    lying = LyingS3(upstream, lie, uploads=uploads, max_pages=max_pages, max_s=max_s, delay_s=delay_s)
    server = _Server(("127.0.0.1", 0), _Handler)
    server.lying = lying  # type: ignore[attr-defined]
    lying.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="lying-s3", daemon=True)
    thread.start()
    try:
        yield lying
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

"""What a response body is to the bucket client: a GET's stream read in bounded chunks, an error's code.

Apart from :mod:`~artifactkit.store.s3.objects` (the requests) because nothing here sends one: a body only
reads what already arrives, and a failure midway is the caller's to translate and to send again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from artifactkit.errors import RemoteStoreError
from artifactkit.store.s3.failures import raise_as

MIB: Final = 1 << 20
#: What a GET body stream hands over at once, at least: bounds what a bounded read pulls past its limit.
STREAM_CHUNK: Final = 64 << 10


class Body:
    """A GET body as a file-like ``read(n)``: what ``s3/download.py`` reads blobs through; ``translate``: a
    failure midway as one of ours."""

    def __init__(self, result: Any, translate: Callable[[BaseException], RemoteStoreError]) -> None:
        self._translate = translate
        self._chunks: Iterator[Any] | None = iter(result.stream(min_chunk_size=STREAM_CHUNK))
        self._rest = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return b"".join(iter(lambda: self.read(MIB), b""))
        while not self._rest and self._chunks is not None:
            try:
                self._rest = memoryview(next(self._chunks))
            except StopIteration:
                self._chunks = None
            except Exception as err:  # noqa: BLE001 - the transfer failed midway (only obstore runs in next()): re-raised
                raise_as(self._translate(err), err)
        out, self._rest = bytes(self._rest[:size]), self._rest[size:]
        return out

    def close(self) -> None:
        # Dropping the stream drops the connection: unread bytes are never fetched, let alone buffered.
        self._chunks, self._rest = None, memoryview(b"")


def error_code(body: bytes) -> str:
    """The S3 error code in an error answer's body ("" where it has none)."""
    found = re.search(rb"<Code>([A-Za-z0-9.]{1,64})</Code>", body)
    return found[1].decode() if found else ""


def read_at_most(body: Body, count: int) -> bytes:
    """Up to ``count`` bytes of a response body, in chunks of at most 1 MiB (memory grows with what arrives)."""
    chunks, total = [], 0
    while total < count and (chunk := body.read(min(MIB, count - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)

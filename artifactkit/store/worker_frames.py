"""The wire format between a worker pool and its children: length-prefixed pickles over a pipe.

Kept apart (struct and pickle only) so a child process imports nothing it does not use: its start-up
is paid on every publish or download that uses workers.
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any, Final

_FRAME: Final = struct.Struct(">Q")


def _read_exact(stream: IO[bytes], count: int) -> bytes:
    chunks, got = [], 0
    while got < count:
        chunk = stream.read(count - got)  # a raw pipe may return less than asked
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: IO[bytes]) -> Any:
    """One message, or ``EOFError`` when the other side closed. Only ever between a parent and the
    child it started, over pipes nobody else holds: the pickles are our own."""
    (length,) = _FRAME.unpack(_read_exact(stream, _FRAME.size))
    return pickle.loads(_read_exact(stream, length))  # noqa: S301 - our own child's pipe, see above


def encode_frame(obj: object) -> bytes:
    """The bytes of one message: its length, then its pickle."""
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(body)) + body


def write_frame(stream: IO[bytes], obj: object) -> None:
    """One message (pickled before anything is written: a failure to pickle writes nothing)."""
    write_raw(stream, encode_frame(obj))


def write_raw(stream: IO[bytes], frame: bytes) -> None:
    """Write an encoded message whole."""
    view = memoryview(frame)
    while view:
        written = stream.write(view)  # a raw pipe may take less than given
        view = view[written or 0:]
    stream.flush()

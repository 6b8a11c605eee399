"""The blobs (and tree objects) a store's versions need, each with the sizes its users record: added as the versions
are read, read back sorted by digest with each digest once (``verify`` checks each once; ``gc`` keeps them), and
the names of a listing that are none of them (what ``gc`` sweeps, what ``verify`` reports as left over).

Why an external sort (:class:`~artifactkit.store.sorted_runs.SortedRuns`) rather than a set: a set of every distinct
digest costs about 100 bytes each as Python objects (a gigabyte at ten million blobs), and even a packed table grows
with the store. On disk, each entry of each version costs 42 bytes of a temporary file (its digest, the size it
records, a length), and memory stays at one run and the merge's buffers, whatever the store holds. Who uses a
blob is not kept at all: ``verify`` walks the versions again for that, only when a blob is found wrong.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from artifactkit.errors import IntegrityError
from artifactkit.store.sorted_runs import SortedRuns

T = TypeVar("T")
_DIGEST_BYTES = 32


class NeededBlobs:
    """Digests and the sizes recorded for them; :meth:`finish` once every version is read, then read it back."""

    def __init__(self) -> None:
        self._runs = SortedRuns()
        self._lock = threading.Lock()  # versions are read on several threads (a bucket's requests overlap)
        self.count = 0
        self.bytes = 0

    def add(self, digest: str, size: int) -> None:
        """``digest`` (64 hex digits, checked by the reader of the manifest) is needed, recorded as ``size`` bytes."""
        record = bytes.fromhex(digest) + size.to_bytes(8, "big")
        with self._lock:
            self._runs.add(record)

    def finish(self) -> None:
        """Every version is read: sort what was added, and count the digests and the bytes (each once)."""
        self._runs.compact()
        self.count = self.bytes = 0
        for _, sizes in self.items():
            self.count += 1
            self.bytes += sizes[0]

    def __len__(self) -> int:
        return self.count

    def items(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """Each digest, in order, with every size recorded for it (in increasing order)."""
        digest, sizes = b"", list[int]()
        for record in self._runs:
            if record[:_DIGEST_BYTES] != digest:
                if sizes:
                    yield digest.hex(), tuple(sizes)
                digest, sizes = record[:_DIGEST_BYTES], []
            sizes.append(int.from_bytes(record[_DIGEST_BYTES:], "big"))
        if sizes:
            yield digest.hex(), tuple(sizes)

    def unneeded(self, names: Iterable[str]) -> Iterator[str]:
        """The ``names`` (a directory's, in any order) that are no digest needed, sorted (by their bytes)."""
        listed = SortedRuns()
        try:
            for name in names:
                listed.add(os.fsencode(name))
            yield from (os.fsdecode(name) for name in _not_needed(((name, name) for name in listed), self._hex()))
        finally:
            listed.close()

    def unneeded_in_order(self, items: Iterable[T], key: Callable[[T], str], *, where: str) -> Iterator[T]:
        """The ``items`` whose ``key`` is no digest needed, of a listing in key order (a bucket's); one out of order is
        :class:`IntegrityError`, before it could make a needed blob look unneeded."""
        previous = b""

        def keyed() -> Iterator[tuple[bytes, T]]:
            nonlocal previous
            for item in items:
                name = key(item).encode("utf-8", "surrogatepass")
                if name <= previous and previous:
                    raise IntegrityError(f"{where}: the listing is not in key order ({name!r} after {previous!r}), "
                                         "so which names are needed cannot be told", path=where)
                previous = name
                yield name, item
        return _not_needed(keyed(), self._hex())

    def _hex(self) -> Iterator[bytes]:
        return (digest.encode("ascii") for digest, _ in self.items())

    def close(self) -> None:
        self._runs.close()


def _not_needed(listed: Iterator[tuple[bytes, T]], needed: Iterator[bytes]) -> Iterator[T]:
    """The items of ``listed`` (``(name, item)`` in name order) whose name is not in ``needed`` (in order): a merge."""
    want = next(needed, None)
    for name, item in listed:
        while want is not None and want < name:
            want = next(needed, None)
        if want != name:
            yield item

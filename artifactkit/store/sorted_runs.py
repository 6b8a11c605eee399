"""An external sort: byte strings kept sorted, each once, in runs on an unnamed temporary file, then merged, so that
what ``verify`` and ``gc`` learn per entry of a store of any size costs disk, not memory (issue 52).

Memory: the run being filled (:data:`RUN_BYTES` of records, about twice that as Python objects while it is sorted)
and, while merging, a read buffer of :data:`READ_BYTES` for each of at most :data:`FAN_IN` runs: about 14 MiB in
all, for any number of records. The file takes each record once per run it is in
(2 bytes of length besides), and once more after :meth:`SortedRuns.compact`.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterator
from typing import Final

#: Records (with their 2-byte lengths) held before they are sorted and written out as a run.
RUN_BYTES: Final = 4 << 20
#: What a run's reader reads at once.
READ_BYTES: Final = 64 << 10
#: Runs merged at once: what a merge holds is this many reads, whatever the number of runs (more are merged in
#: rounds, each record written once more a round).
FAN_IN: Final = 32
#: The longest record (a length is 2 bytes): a name in a directory is at most 255 bytes, a bucket's key 1,024.
MAX_RECORD: Final = (1 << 16) - 1


class SortedRuns:
    """Byte strings added in any order, read back sorted with each repeat dropped (:meth:`__iter__`)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="artifactkit-sort-")  # noqa: SIM115 - closed by close()
        self._end = 0
        self._runs: list[tuple[int, int]] = []  # (offset, length) of each run written
        self._held: list[bytes] = []
        self._held_bytes = 0

    def add(self, record: bytes) -> None:
        if len(record) > MAX_RECORD:
            raise ValueError(f"a record of {len(record)} bytes is longer than {MAX_RECORD}")
        self._held.append(record)
        self._held_bytes += len(record) + 2
        if self._held_bytes >= RUN_BYTES:
            self._spill()

    def _spill(self) -> None:
        if not self._held:
            return
        self._held.sort()
        self._write_run(_unique(iter(self._held)))
        self._held, self._held_bytes = [], 0

    def _write_run(self, records: Iterator[bytes]) -> None:
        start = self._end
        out = bytearray()
        for record in records:
            out += len(record).to_bytes(2, "big")
            out += record
            if len(out) >= READ_BYTES:
                self._end += os.pwrite(self._file.fileno(), out, self._end)
                out.clear()
        if out:
            self._end += os.pwrite(self._file.fileno(), out, self._end)
        self._runs.append((start, self._end - start))

    def compact(self) -> None:
        """Merge every run into one, so that each later reading is one sequential read."""
        self._merge_down(1)

    def __iter__(self) -> Iterator[bytes]:
        self._merge_down(FAN_IN)
        return self._merged(self._runs)

    def _merge_down(self, most: int) -> None:
        """Merge runs, :data:`FAN_IN` at a time, until at most ``most`` are left."""
        self._spill()
        while len(self._runs) > most:
            merging, self._runs = self._runs[:FAN_IN], self._runs[FAN_IN:]
            self._write_run(self._merged(merging))

    def _merged(self, runs: list[tuple[int, int]]) -> Iterator[bytes]:
        if not runs:
            return iter(())
        if len(runs) == 1:
            return self._read(*runs[0])
        return _unique(heapq.merge(*(self._read(*run) for run in runs)))

    def _read(self, offset: int, length: int) -> Iterator[bytes]:
        end, buffer, at = offset + length, b"", 0
        while True:
            if len(buffer) - at < 2 or len(buffer) - at < 2 + int.from_bytes(buffer[at:at + 2], "big"):
                if offset >= end:
                    return
                chunk = os.pread(self._file.fileno(), min(READ_BYTES, end - offset), offset)
                if not chunk:
                    raise OSError(f"the sort's temporary file ended at {offset} bytes, before its run's {end}")
                offset += len(chunk)
                buffer, at = buffer[at:] + chunk, 0
                continue
            size = int.from_bytes(buffer[at:at + 2], "big")
            yield buffer[at + 2:at + 2 + size]
            at += 2 + size

    def close(self) -> None:
        self._file.close()


def _unique(records: Iterator[bytes]) -> Iterator[bytes]:
    """``records`` (sorted) with each repeat dropped."""
    previous = None
    for record in records:
        if record != previous:
            yield record
            previous = record

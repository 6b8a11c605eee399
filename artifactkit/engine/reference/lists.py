"""The door's engine-owned values (:mod:`~artifactkit.engine.values`) as the reference holds them: plain lists,
every answer computed from the entries in hand."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping

from artifactkit.engine.blobs import BlobsNeeded
from artifactkit.engine.reference.restore_meta import plan
from artifactkit.engine.values import Captured, EntryRun, Layout, Owners, Parsed, ReadBatch, Staged, StageItem
from artifactkit.errors import TimestampNotRepresentable
from artifactkit.manifest.encode import check_representable
from artifactkit.manifest.paths import parent_of
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import shallowest_first


class CapturedList(tuple[FileMeta, ...], Captured):
    """A captured tree's entries (:class:`~artifactkit.engine.values.Captured`): the scan's tuple."""

    __slots__ = ()

    def first_unrepresentable(self) -> int | None:
        try:
            check_representable(self, where="")
        except TimestampNotRepresentable as refused:
            return next(at for at, entry in enumerate(self) if entry.path == getattr(refused, "path", None))
        return None

    def file_count(self) -> int:
        return sum(1 for entry in self if entry.kind == "file")

    def file_bytes(self) -> int:
        return sum(entry.size for entry in self if entry.kind == "file" and entry.hardlink is None)

    def planned_reads(self, identities: Mapping[str, tuple[int, int]]) -> tuple[list[StageItem], int]:
        reads = [(at, entry, identities[entry.path]) for at, entry in enumerate(self)
                 if entry.kind == "file" and entry.hardlink is None]
        return reads, sum(entry.size for _, entry, _ in reads)

    def positions_of(self, kind: str) -> list[int]:
        return [at for at, entry in enumerate(self) if entry.kind == kind]

    def path_atimes(self, positions: list[int]) -> list[tuple[str, int]]:
        return [(self[at].path, self[at].atime_ns) for at in positions]


class ReadList(list[Staged], ReadBatch):
    """A batch of reads (:class:`~artifactkit.engine.values.ReadBatch`): the ``Staged`` values themselves."""

    __slots__ = ()

    def staged_count(self) -> int:
        return sum(1 for found in self if found.staged)

    def move_chunks(self, per_call: int) -> Iterator[list[tuple[str, str]]]:
        # A chunk's names made just before it is moved (all 100,000 at once were 20 MB beside the manifest).
        pending = (found for found in self if found.staged)
        while chunk := [(found.path(), found.sha256) for found in itertools.islice(pending, per_call)]:
            yield chunk


class Run(list[FileMeta], EntryRun):
    """Entries of one directory to create (:class:`~artifactkit.engine.values.EntryRun`)."""

    __slots__ = ()

    @property
    def file_bytes(self) -> int:
        return sum(entry.size for entry in self if entry.kind == "file")

    def part(self, start: int, stop: int) -> Run:
        return Run(self[start:stop])


class EntryList(Parsed):
    """A parsed manifest's entries (:class:`~artifactkit.engine.values.Parsed`), shape-checked by the parse."""

    def __init__(self, entries: Iterable[FileMeta], name: str = "", source_read_noatime: bool = True) -> None:
        self.entries = tuple(entries)
        self.name = name
        self.source_read_noatime = source_read_noatime

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[FileMeta]:
        return iter(self.entries)

    def __getitem__(self, index: int) -> FileMeta:  # type: ignore[override]  # a slice is never asked for
        return self.entries[index]

    def layout(self, owners: Owners) -> Layout:
        return lay_out(plan(self.entries, owners).values())

    def blobs(self) -> BlobsNeeded:
        return BlobsNeeded.of({entry.sha256: entry.size for entry in self.entries
                               if entry.kind == "file" and entry.sha256 is not None})


def lay_out(planned: Iterable[FileMeta]) -> Layout:
    """The :class:`~artifactkit.engine.values.Layout` of planned entries (a shape-checked tree), in one pass."""
    dirs: dict[str, FileMeta] = {}
    made: dict[str, Run] = {}
    late: list[FileMeta] = []
    for entry in planned:
        if entry.kind == "dir":
            dirs[entry.path] = entry
            if entry.path != ROOT:
                late.append(entry)
        elif entry.hardlink is not None:
            late.append(entry)
        else:
            made.setdefault(parent_of(entry.path), Run()).append(entry)
    return Layout(dirs, [(path, made[path]) for path in shallowest_first(dirs) if path in made], late)

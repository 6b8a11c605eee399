"""The values that cross the door (:mod:`~artifactkit.engine.protocol`): the store's plain ones (a scanned tree,
a read, a laid-out tree) and the few an engine owns — a captured tree, a batch of reads, a parsed manifest and
its runs — as the abstract types the store asks them through (and never asks whether a value is one).

An engine-owned value answers what the store needs of it without saying how it holds its entries: the
reference's are plain lists (:mod:`~artifactkit.engine.reference.lists`), the native engine's the core's
handles, each ``FileMeta`` or ``Staged`` made only when something asks for it.
"""

from __future__ import annotations

import abc
import bisect
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, NamedTuple, Protocol, overload

import attrs

from artifactkit.engine.blobs import BlobsNeeded
from artifactkit.metadata.model import Extents, FileMeta

#: The owners policy of a download (:func:`~artifactkit.engine.reference.restore_meta.plan`).
Owners = Literal["exact", "current"]
#: A file to read: ``(index in the tree, entry as captured, (st_dev, st_ino) as captured)``.
StageItem = tuple[int, FileMeta, tuple[int, int]]


class Captured(Sequence[FileMeta], abc.ABC):
    """A captured tree's entries in the scan's order, and what a publish asks of all of them at once."""

    __slots__ = ()

    @abc.abstractmethod
    def first_unrepresentable(self) -> int | None:
        """The position of the first entry with a time no manifest carries (``check_representable``'s)."""

    @abc.abstractmethod
    def file_count(self) -> int:
        """How many regular files, every name of a hard link."""

    @abc.abstractmethod
    def file_bytes(self) -> int:
        """The bytes of the regular files read (a hard link's once)."""

    @abc.abstractmethod
    def planned_reads(self, identities: Mapping[str, tuple[int, int]]) -> tuple[Sequence[StageItem], int]:
        """Every regular file but a hard link's later names, in order, as the default plan reads them; their bytes."""

    @abc.abstractmethod
    def positions_of(self, kind: str) -> list[int]:
        """The positions of the entries of ``kind`` (``"symlink"``, ``"dir"``, ...), in order."""

    @abc.abstractmethod
    def path_atimes(self, positions: list[int]) -> list[tuple[str, int]]:
        """``(path, atime_ns)`` as captured of the entries at ``positions``, without making every entry."""


@attrs.frozen
class ScannedTree:
    """A captured tree: metadata in path order, and identity (dev, ino) to detect swaps later."""

    root: str
    entries: Captured
    identities: Mapping[str, tuple[int, int]]
    listed_noatime: bool
    #: Entries a stat cache recognized (not in ``entries``): path -> (manifest line, digest or None).
    cached: dict[str, tuple[str, str | None]] = attrs.field(factory=dict)
    #: Entries whose whole listing a stat cache recognized (in neither): their lines are the recorded ones.
    matched: list[str] = attrs.field(factory=list)
    #: The scan's ``lstat`` of every matched directory and link, for ``capture_again``.
    kept: dict[str, os.stat_result] = attrs.field(factory=dict)


class CacheHits(Protocol):
    """What a scan asks a stat cache (:class:`~artifactkit.store.stat_cache.StatCache`)."""

    def match_listing(self, relpaths: list[str], stats: list[os.stat_result], /) -> bool:
        """Whether these entries of one directory are all as recorded (then none is captured)."""

    def entry_line(self, path: str, st: os.stat_result, /) -> tuple[str, str | None] | None:
        """One entry's hit, ``(manifest line, digest or None)``, or ``None``: capture it."""


def staging_name(index: int) -> str:
    """The name the read at ``index`` stages its bytes under, in the transaction's staging directory (the core
    spells it the same: ``stage_name``)."""
    return f"blob-{index}"


class Staged(NamedTuple):
    """One file's read (a tuple underneath: it is built once per file). ``staged``: its bytes are new to the
    store and the first of their content in this publish, kept in staging at :meth:`path` (or, for a
    transaction ``in_memory``, in ``data``)."""

    position: int
    sha256: str
    noatime: bool
    flags: int | None
    extents: Extents | None
    staged: bool
    data: bytes | None = None

    def path(self) -> str:
        """Where a staged file's bytes are, relative to the staging dir."""
        return staging_name(self.position)


class ReadBatch(Sequence[Staged], abc.ABC):
    """A batch of reads as its engine holds them; a transaction takes its staged blobs' moves from it."""

    __slots__ = ()

    @abc.abstractmethod
    def staged_count(self) -> int:
        """How many of them staged their bytes (are new to the store)."""

    @abc.abstractmethod
    def move_chunks(self, per_call: int) -> Iterator[Sequence[tuple[str, str]]]:
        """The staged blobs' ``(staging name, digest)`` moves, at most ``per_call`` a chunk, in order; each chunk
        a sequence its engine's ``move_files`` takes."""

    def read_with_atime(self) -> list[int]:
        """The tree positions of the files read without ``O_NOATIME`` (refused: not their owner), in order (an
        engine that holds its reads answers without making each ``Staged``)."""
        return [found.position for found in self if not found.noatime]


class Reads(Sequence[Staged]):
    """A publish's reads, the engine's batches joined in order without copying them (a list of 10,000
    ``Staged`` made of the native engine's would undo what holding them saves)."""

    def __init__(self) -> None:
        self.batches: list[ReadBatch] = []
        self._starts = [0]

    def add(self, batch: ReadBatch) -> None:
        self.batches.append(batch)
        self._starts.append(self._starts[-1] + len(batch))

    def __len__(self) -> int:
        return self._starts[-1]

    def __iter__(self) -> Iterator[Staged]:
        return itertools.chain.from_iterable(self.batches)

    @overload
    def __getitem__(self, index: int) -> Staged: ...
    @overload
    def __getitem__(self, index: slice) -> list[Staged]: ...
    def __getitem__(self, index: int | slice) -> Staged | list[Staged]:
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self)))]
        at = index + len(self) if index < 0 else index
        if not 0 <= at < len(self):
            raise IndexError(f"read {index} of {len(self)}")
        batch = bisect.bisect_right(self._starts, at) - 1
        return self.batches[batch][at - self._starts[batch]]


class EntryRun(Sequence[FileMeta], abc.ABC):
    """Entries of one directory to create, as their engine holds them."""

    __slots__ = ()

    @property
    @abc.abstractmethod
    def file_bytes(self) -> int:
        """The sizes of the regular files among them, summed."""

    @abc.abstractmethod
    def part(self, start: int, stop: int) -> EntryRun:
        """Entries ``start..stop`` of them, as a run of the same engine."""


#: A batch item of a download: a directory (relative to the tree's root) and the files, links and special
#: files to create in it (its subdirectories exist already; hard links' later names come after).
CreateItem = tuple[str, EntryRun]


def covered(batch: Sequence[CreateItem]) -> tuple[int, int]:
    """Entries and file bytes of a download batch, for its progress."""
    return sum(len(entries) for _, entries in batch), sum(entries.file_bytes for _, entries in batch)


@attrs.frozen
class Layout:
    """A planned tree as its restore makes it: the directories (by path), what is created in each (the
    engine's items, directories shallowest first), and what is read back once all of it exists — every
    directory but the root and every later name of a hard link, in manifest order."""

    dirs: dict[str, FileMeta]
    items: list[CreateItem]
    late: list[FileMeta]
    #: Of a part of a tree made in parts: entries an earlier part made (directories it lies in, first names its
    #: later names link to), listed so that the parse checks every claim against them, never made again.
    made_before: frozenset[str] = frozenset()
    #: Directories whose metadata this part leaves as it is: a later part seals them (entries still go in), or an
    #: earlier part did.
    unsealed: frozenset[str] = frozenset()


class Parsed(Sequence[FileMeta], abc.ABC):
    """A manifest's entries in manifest order, its shape checked, as the engine that parsed it holds them."""

    #: The artifact it names, and whether its source was read without moving atimes.
    name: str
    source_read_noatime: bool

    @abc.abstractmethod
    def layout(self, owners: Owners) -> Layout:
        """The restore's :class:`Layout` under ``owners`` (its plan's refusal or warning names every entry)."""

    @abc.abstractmethod
    def blobs(self) -> BlobsNeeded:
        """The blobs a download reads: ``{sha256: size}`` of every regular file, counted without making it."""

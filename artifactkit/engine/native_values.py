"""The native engine's values (:mod:`~artifactkit.engine.native`): the door's types
(:mod:`~artifactkit.engine.values`) over the handles the core returns — a captured tree, a publish's kept reads,
a parsed manifest and its runs — each ``FileMeta`` or ``Staged`` made only when something asks (a stat cache, a
seam other than the core's, a failure's message): of 10,000 files, those objects and the walks over them were
15-20 ms of the publishing thread.

The handles come from :mod:`~artifactkit.engine.native`, the one module that calls the core; this one only asks
them what the door asks (it names the core's types for the type checker alone).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, overload

from artifactkit.engine.blobs import BlobsNeeded
from artifactkit.engine.reference.lists import Run, lay_out
from artifactkit.engine.reference.restore_meta import plan, plans_nothing
from artifactkit.engine.values import (
    Captured,
    CreateItem,
    EntryRun,
    Layout,
    Owners,
    Parsed,
    ReadBatch,
    Reads,
    Staged,
    StageItem,
)
from artifactkit.manifest.paths import parent_of
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import shallowest_first

if TYPE_CHECKING:
    from artifactkit import _native


class _OnDemand:
    """Entries the core holds, every ``FileMeta`` made at once (by :meth:`_make`) the first time one is asked for."""

    _all: tuple[FileMeta, ...] | None = None

    def _make(self) -> tuple[FileMeta, ...]:
        raise NotImplementedError

    def _entries(self) -> tuple[FileMeta, ...]:
        if self._all is None:
            self._all = self._make()
        return self._all

    @overload
    def __getitem__(self, index: int) -> FileMeta: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[FileMeta, ...]: ...
    def __getitem__(self, index: int | slice) -> FileMeta | tuple[FileMeta, ...]:
        return self._entries()[index]

    def __iter__(self) -> Iterator[FileMeta]:
        return iter(self._entries())


class CapturedEntries(_OnDemand, Captured):
    """A captured tree (:class:`~artifactkit._native.CapturedTree`) as :class:`~artifactkit.engine.values.Captured`."""

    def __init__(self, tree: _native.CapturedTree) -> None:
        self.tree = tree

    def _make(self) -> tuple[FileMeta, ...]:
        return self.tree.metas(FileMeta)

    def __len__(self) -> int:
        return len(self.tree)

    def first_unrepresentable(self) -> int | None:
        return self.tree.first_unrepresentable()

    def file_count(self) -> int:
        return self.tree.file_count()

    def file_bytes(self) -> int:
        return self.tree.read_totals()[1]

    def positions_of(self, kind: str) -> list[int]:
        return self.tree.positions_of(kind)

    def path_atimes(self, positions: list[int]) -> list[tuple[str, int]]:
        return self.tree.path_atimes(positions)

    def planned_reads(self, identities: Mapping[str, tuple[int, int]]) -> tuple[CapturedReads, int]:
        reads = CapturedReads(self, identities)
        return reads, reads.total_bytes


class CapturedIdentities(Mapping[str, tuple[int, int]]):
    """``ScannedTree.identities`` of a captured tree: path -> ``(dev, ino)``, made on demand."""

    def __init__(self, tree: _native.CapturedTree) -> None:
        self.tree = tree
        self._all: dict[str, tuple[int, int]] | None = None

    def __getitem__(self, path: str) -> tuple[int, int]:
        if self._all is None:
            self._all = self.tree.identities()
        return self._all[path]

    def __iter__(self) -> Iterator[str]:
        if self._all is None:
            self._all = self.tree.identities()
        return iter(self._all)

    def __len__(self) -> int:
        return len(self.tree)


class CapturedReads(Sequence[StageItem]):
    """The files a publish of a captured tree reads, in order, each ``(index, entry, identity)`` made on demand;
    the core stages them from its own entries."""

    def __init__(self, entries: CapturedEntries, identities: Mapping[str, tuple[int, int]]) -> None:
        self.entries, self.tree, self._identities = entries, entries.tree, identities
        self._count, self.total_bytes = self.tree.read_totals()

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> StageItem:  # type: ignore[override]  # a slice is never asked for
        at = self.tree.read_position(index + self._count if index < 0 else index)
        if at is None:
            raise IndexError(f"read {index} of {self._count}")
        entry = self.entries[at]
        return at, entry, self._identities[entry.path]


class KeptReads(ReadBatch):
    """Reads ``start..stop`` of a publish's :class:`~artifactkit._native.StageState` (one ``stage_files`` call's)
    as :class:`~artifactkit.engine.values.ReadBatch`."""

    def __init__(self, state: _native.StageState, start: int, stop: int) -> None:
        self.state, self.start, self.stop = state, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> Staged:  # type: ignore[override]  # a slice is never asked for
        at = index + len(self) if index < 0 else index
        if not 0 <= at < len(self):
            raise IndexError(f"read {index} of {len(self)}")
        index_, sha, noatime, flags, runs, staged = self.state.read(self.start + at)
        return Staged(index_, sha, noatime, flags, None if runs is None else tuple(runs), staged)

    def staged_count(self) -> int:
        return self.state.staged_count(self.start, self.stop)

    def move_chunks(self, per_call: int) -> Iterator[StagedMoves]:
        for start in range(self.start, self.stop, per_call):
            yield StagedMoves(self.state, start, min(start + per_call, self.stop))

    def read_with_atime(self) -> list[int]:
        return self.state.atime_positions(self.start, self.stop)


class StagedMoves(Sequence[tuple[str, str]]):
    """The ``(staging name, digest)`` moves of the staged reads among ``start..stop`` of a state: the core moves
    them as the range (:func:`rename_files`); any other reader (a crash trace's label) gets the pairs."""

    def __init__(self, state: _native.StageState, start: int, stop: int) -> None:
        self.state, self.start, self.stop = state, start, stop
        self._pairs: list[tuple[str, str]] | None = None

    def __len__(self) -> int:
        return self.state.staged_count(self.start, self.stop)

    def __getitem__(self, index: int) -> tuple[str, str]:  # type: ignore[override]  # a slice is never asked for
        if self._pairs is None:
            self._pairs = self.state.moves(self.start, self.stop)
        return self._pairs[index]


def kept_state(found: Sequence[Staged]) -> _native.StageState | None:
    """The state that keeps every one of ``found``, in its order, and nothing else; or ``None``."""
    if not isinstance(found, Reads) or not found.batches:
        return None
    state = getattr(found.batches[0], "state", None)
    at = 0
    for batch in found.batches:
        if not isinstance(batch, KeptReads) or batch.state is not state or batch.start != at:
            return None
        at = batch.stop
    return state if state is not None and at == len(state) else None


class CoreTree(_OnDemand, Parsed):
    """A manifest the core parsed (:class:`~artifactkit._native.ParsedTree`) as
    :class:`~artifactkit.engine.values.Parsed`."""

    def __init__(self, tree: _native.ParsedTree) -> None:
        self.tree = tree
        self.name = tree.name
        self.source_read_noatime = tree.noatime

    def _make(self) -> tuple[FileMeta, ...]:
        return self.tree.metas(FileMeta)

    def __len__(self) -> int:
        return len(self.tree)

    def blobs(self) -> BlobsNeeded:
        count, size = self.tree.needed_totals()
        return BlobsNeeded(count, size, self.tree.needed)

    def layout(self, owners: Owners) -> Layout:
        # Anything the plan changes or refuses is planned entry by entry, so its error or warning names every entry.
        return self.own_layout(owners) or lay_out(plan(self, owners).values())

    def own_layout(self, owners: Owners) -> Layout | None:
        """The reference's plan, asked of every directory, every entry made here (FIFOs, devices, later names)
        and one file or symlink of each combination of the fields it reads (the core names those): where it
        changes and refuses nothing, the layout with the files and symlinks as :class:`CoreRun` runs of the
        core's own entries; else ``None``."""
        dirs_at, others_at, made, reps_at = self.tree.layout()
        dirs, others = self.tree.metas(FileMeta, dirs_at), self.tree.metas(FileMeta, others_at)
        if not plans_nothing([*dirs, *others, *self.tree.metas(FileMeta, reps_at)], owners):
            return None
        by_index = dict(zip(dirs_at, dirs, strict=True))
        runs = {by_index[dir_at].path: CoreRun(self.tree, group, 0, count)
                for group, (dir_at, count) in enumerate(made)}
        specials: dict[str, Run] = {}
        for entry in others:
            if entry.hardlink is None:  # a FIFO or a device: made by the reference's create_special
                specials.setdefault(parent_of(entry.path), Run()).append(entry)
        items: list[CreateItem] = []
        for path in shallowest_first(entry.path for entry in dirs):
            if path in runs:
                items.append((path, runs[path]))
            if path in specials:
                items.append((path, specials[path]))
        # Read back at the end, in manifest order: every directory but the root, every later name.
        late = [entry for _, entry in sorted([*zip(dirs_at, dirs, strict=True), *zip(others_at, others, strict=True)],
                                             key=lambda pair: pair[0])
                if entry.path != ROOT and (entry.kind == "dir" or entry.hardlink is not None)]
        return Layout({entry.path: entry for entry in dirs}, items, late)


class CoreRun(EntryRun):
    """Entries ``start..stop`` of one directory's files and symlinks in a :class:`CoreTree` (a made group of its
    layout) as :class:`~artifactkit.engine.values.EntryRun`: the core creates them from its own entries."""

    def __init__(self, tree: _native.ParsedTree, group: int, start: int, stop: int) -> None:
        self.tree = tree
        self.ref = (group, start, stop)
        self._metas: tuple[FileMeta, ...] | None = None

    def _entries(self) -> tuple[FileMeta, ...]:
        if self._metas is None:
            self._metas = self.tree.run_metas(FileMeta, *self.ref)
        return self._metas

    @property
    def file_bytes(self) -> int:
        return self.tree.run_bytes(*self.ref)

    def __len__(self) -> int:
        return self.ref[2] - self.ref[1]

    def __getitem__(self, index: int) -> FileMeta:  # type: ignore[override]  # a slice is never asked for
        return self._entries()[index]

    def __iter__(self) -> Iterator[FileMeta]:
        return iter(self._entries())

    def part(self, start: int, stop: int) -> EntryRun:
        group, first, _ = self.ref
        start, stop = min(start, len(self)), min(stop, len(self))
        return CoreRun(self.tree, group, first + start, first + max(start, stop))

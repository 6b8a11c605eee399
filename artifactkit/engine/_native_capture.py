"""A publish's scan kept in the native core (:class:`~artifactkit._native.CapturedTree`), so its files go from the
walk to the reads and the manifest without becoming ``FileMeta`` objects on the way: the publish's counterpart
of :mod:`~artifactkit.engine._native_tree`.

:func:`~artifactkit.engine._native_scan.capture` returns a :class:`~artifactkit.engine.reference.scan.ScannedTree` whose
``entries`` are a :class:`CapturedEntries` and whose ``identities`` are a :class:`CapturedIdentities`: the
``FileMeta`` values (made by the core, all at once, as the reference's scan makes them) and the identities
exist only once something asks — a seam that iterates them, a stat cache, a failure's message. What a
publish asks of every entry the core answers instead (:class:`~artifactkit.engine.plan.CoreCapture`): the first
time no manifest can carry, how many files there are, which are read (:class:`CapturedReads`, which the native
executor stages by ranges of the core's own entries) and, with what the reads found, the manifest
(:func:`~artifactkit.engine._native_manifest.manifest_captured`).

Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

from artifactkit import _native
from artifactkit.engine._native_lazy import MadeOnDemand
from artifactkit.engine.reference.stage import StageItem
from artifactkit.metadata.model import FileMeta

Identity = tuple[int, int]


class CapturedEntries(MadeOnDemand):
    """Every entry of a captured tree, in the scan's order, made ``FileMeta`` on demand."""

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

    def planned_reads(self, identities: Mapping[str, Identity]) -> tuple[CapturedReads, int]:
        reads = CapturedReads(self, identities)
        return reads, reads.total_bytes


class CapturedIdentities(Mapping[str, Identity]):
    """``ScannedTree.identities`` of a captured tree: path -> ``(dev, ino)``, made on demand."""

    def __init__(self, tree: _native.CapturedTree) -> None:
        self.tree = tree
        self._all: dict[str, Identity] | None = None

    def _identities(self) -> dict[str, Identity]:
        if self._all is None:
            self._all = self.tree.identities()
        return self._all

    def __getitem__(self, path: str) -> Identity:
        return self._identities()[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._identities())

    def __len__(self) -> int:
        return len(self.tree)


class CapturedReads(Sequence[StageItem]):
    """The files a publish of a captured tree reads, in order: ``(index, entry, identity)`` each, made on demand
    (a failure's message, a seam other than the core's stage); the core stages them by :meth:`batches`."""

    def __init__(self, entries: CapturedEntries, identities: Mapping[str, Identity]) -> None:
        self.entries = entries
        self.tree = entries.tree
        self._identities = identities
        self._count, self.total_bytes = self.tree.read_totals()

    def __len__(self) -> int:
        return self._count

    def _item(self, k: int) -> StageItem:
        at = self.tree.read_position(k)
        if at is None:
            raise IndexError(f"read {k} of {self._count}")
        entry = self.entries[at]
        return at, entry, self._identities[entry.path]

    @overload
    def __getitem__(self, index: int) -> StageItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[StageItem]: ...
    def __getitem__(self, index: int | slice) -> StageItem | list[StageItem]:
        if isinstance(index, slice):
            return [self._item(k) for k in range(*index.indices(self._count))]
        return self._item(index + self._count if index < 0 else index)

    def __iter__(self) -> Iterator[StageItem]:
        return (self._item(k) for k in range(self._count))

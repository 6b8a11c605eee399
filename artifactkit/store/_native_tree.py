"""A download's manifest parsed by the native core and kept there (:class:`~artifactkit._native.ParsedTree`), so
its files go from the parse to the core's create without becoming ``FileMeta`` objects on the way.

:func:`parse` reads and checks the bytes as :func:`~artifactkit.store.manifest.parse_manifest` does (the same
core parse as :mod:`~artifactkit.store._native_manifest`'s, with the same declines, left to the reference). The
:class:`CoreTree` it returns is the manifest's entries as a :class:`~artifactkit.store.download.Prepared`
sequence: each ``FileMeta`` is made (by calling the class, as the parse makes them) only when something asks
for it — a restore seam that iterates them, a failure's message.

A restore of it (:meth:`CoreTree.layout`) plans, with the reference's own :func:`~artifactkit.store.restore_meta.plan`
logic, every directory, every entry Python makes itself (FIFOs, devices, hard links' later names) and one file
or symlink of each distinct combination of the fields the plan reads; the core names those
(``native/src/restore/layout.rs``). Where the plan leaves all of them as they are and refuses none, it leaves every
entry as it is, and the files and symlinks go to the executor as :class:`CoreRun` runs of the core's own entries.
Anything else — a refusal, a re-owned entry — is planned entry by entry by the restore, as for any manifest,
so its error or warning names every entry.

Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import overload

from artifactkit import _native
from artifactkit.errors import ManifestLimitError
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import shallowest_first
from artifactkit.store._native_lazy import MadeOnDemand
from artifactkit.store._native_manifest import size_limit
from artifactkit.store.blobs import BlobsNeeded
from artifactkit.store.download import Layout, Prepared
from artifactkit.store.executor import CreateItem, EntryRun
from artifactkit.store.paths import parent_of
from artifactkit.store.restore_meta import Owners, plans_nothing


def parse(data: bytes, digest: str) -> CoreTree | None:
    """The core's parse of manifest bytes that hash to ``digest`` (hashed as they are parsed), or ``None``
    where it declines them: where they hash to another digest, or the reference's parse decides."""
    try:
        limit = size_limit()
    except ManifestLimitError:
        return None  # the reference names the setting, after its digest check
    try:
        return CoreTree(_native.parse_tree(data, digest, limit))
    except _native.NativeFailure:
        return None


class CoreTree(MadeOnDemand, Prepared):
    """Every entry of a manifest the core parsed, in manifest order, made ``FileMeta`` on demand."""

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

    def layout(self, owners: Owners) -> Layout | None:
        dirs_at, others_at, made, reps_at = self.tree.layout()
        dirs, others = self.tree.metas(FileMeta, dirs_at), self.tree.metas(FileMeta, others_at)
        if not plans_nothing([*dirs, *others, *self.tree.metas(FileMeta, reps_at)], owners):
            return None
        by_index = dict(zip(dirs_at, dirs, strict=True))
        runs = {by_index[dir_at].path: CoreRun(self.tree, group, 0, count)
                for group, (dir_at, count) in enumerate(made)}
        specials: dict[str, list[FileMeta]] = {}
        for entry in others:
            if entry.hardlink is None:  # a FIFO or a device: made by the reference's create_special
                specials.setdefault(parent_of(entry.path), []).append(entry)
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
    """Entries ``start..stop`` of one directory's files and symlinks in a :class:`CoreTree` (a made group of
    ``native/src/restore/layout.rs``'s layout): the core creates them from its own entries (``ref``)."""

    def __init__(self, tree: _native.ParsedTree, group: int, start: int, stop: int) -> None:
        self.tree = tree
        self.ref = (group, start, stop)
        self._metas: tuple[FileMeta, ...] | None = None
        self._bytes: int | None = None

    def _entries(self) -> tuple[FileMeta, ...]:
        if self._metas is None:
            self._metas = self.tree.run_metas(FileMeta, *self.ref)
        return self._metas

    @property
    def file_bytes(self) -> int:
        if self._bytes is None:
            self._bytes = self.tree.run_bytes(*self.ref)
        return self._bytes

    def __len__(self) -> int:
        return self.ref[2] - self.ref[1]

    @overload
    def __getitem__(self, index: int) -> FileMeta: ...
    @overload
    def __getitem__(self, index: slice) -> CoreRun: ...
    def __getitem__(self, index: int | slice) -> FileMeta | CoreRun:
        if isinstance(index, int):
            return self._entries()[index]
        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ValueError("a run of the parsed tree is sliced in steps of 1")
        group, first, _ = self.ref
        return CoreRun(self.tree, group, first + start, first + max(start, stop))

    def __iter__(self) -> Iterator[FileMeta]:
        return iter(self._entries())

"""A publish's reads kept in the native core (:class:`~artifactkit._native.StageState`), so 10,000 files' results
go from the reads to the manifest and the moves into ``blobs/`` without becoming ``Staged`` tuples on the way:
the reads' counterpart of :mod:`~artifactkit.engine._native_capture`.

The executor yields each batch of ``stage_captured`` as :class:`KeptReads`, a range of the state's reads. A
``Staged`` is made only of a read something asks for (a seam other than the core's, a test); the local
transaction moves the staged blobs by :class:`StagedMoves` ranges, whose names the core makes
(``_native.rename_staged``), and the manifest takes the whole state (:func:`kept_state`). Measured before
(``many``, 10,000 files): the tuples, and the transaction's and the manifest's walks over them, were 15-20 ms of
the publishing thread, on one thread or two.

Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from artifactkit import _native
from artifactkit.engine.reference.stage import HeldReads, Reads, Staged


def staged_of(found: tuple[int, str, bool, int | None, list[tuple[int, int]] | None, bool]) -> Staged:
    """A core read's tuple as the reference's ``Staged`` (extents cross as a list; ``Staged`` holds a tuple,
    hashable as the reference's)."""
    index, sha, noatime, flags, runs, staged = found
    return Staged(index, sha, noatime, flags, None if runs is None else tuple(runs), staged)


class KeptReads(HeldReads):
    """Reads ``start..stop`` of a publish's :class:`~artifactkit._native.StageState`: one ``stage_captured`` call's."""

    def __init__(self, state: _native.StageState, start: int, stop: int) -> None:
        self.state, self.start, self.stop = state, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

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
        return staged_of(self.state.read(self.start + at))

    def staged_count(self) -> int:
        return self.state.staged_count(self.start, self.stop)

    def move_chunks(self, per_call: int) -> Iterator[StagedMoves]:
        for start in range(self.start, self.stop, per_call):
            yield StagedMoves(self.state, start, min(start + per_call, self.stop))


class StagedMoves(Sequence[tuple[str, str]]):
    """The ``(staging name, digest)`` moves of the staged reads among ``start..stop`` of a state: what
    :func:`~artifactkit.engine.native_errors.rename_files` hands the core as the range, any other caller (the
    reference's ``move_files``, a crash trace's label) as the pairs, made when first asked for."""

    def __init__(self, state: _native.StageState, start: int, stop: int) -> None:
        self.state, self.start, self.stop = state, start, stop
        self._pairs: list[tuple[str, str]] | None = None
        self._count: int | None = None

    def _made(self) -> list[tuple[str, str]]:
        if self._pairs is None:
            self._pairs = self.state.moves(self.start, self.stop)
        return self._pairs

    def __len__(self) -> int:
        if self._count is None:
            self._count = self.state.staged_count(self.start, self.stop)
        return self._count

    @overload
    def __getitem__(self, index: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        return self._made()[index]


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

"""Entries the native core holds, as a sequence of ``FileMeta`` made all at once the first time one is asked for:
a download's parsed manifest (:mod:`~artifactkit.engine._native_tree`) and a publish's capture
(:mod:`~artifactkit.engine._native_capture`). Only a seam that iterates them, or a failure's message, pays for
the objects; the core answers everything else about them itself.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import overload

from artifactkit.metadata.model import FileMeta


class MadeOnDemand(Sequence[FileMeta], abc.ABC):
    """A sequence of the core's entries; :meth:`_make` makes every ``FileMeta`` of them, once."""

    _all: tuple[FileMeta, ...] | None = None

    @abc.abstractmethod
    def _make(self) -> tuple[FileMeta, ...]:
        """Every entry as a ``FileMeta``, in order (called once, on first use)."""

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

"""One source file read once and staged: the reference engine's per-file work of a publish."""

from __future__ import annotations

import abc
import bisect
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, overload

from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.content import SourceRead, read_source, write_staged
from artifactkit.store.layout import HasBlob, StagedCopy


def staging_name(index: int) -> str:
    """The name the read at ``index`` stages its bytes under, in the transaction's staging directory (the core
    spells it the same: ``native/src/read/stage.rs``, ``stage_name``)."""
    return f"blob-{index}"


class Staged(NamedTuple):
    """One file's read, as the executor reports it (a tuple underneath: it is built once per file).
    ``staged``: its bytes are new to the store and the first of their content in this publish, kept in
    staging at :meth:`path` (or, for a transaction ``in_memory``, in ``data``)."""

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


class HeldReads(Sequence[Staged], abc.ABC):
    """A batch of reads the executor that made them keeps (the native core's), each a :class:`Staged` only when
    asked for; a transaction takes its staged blobs' moves from it (:meth:`move_chunks`) rather than their names.
    Across one publish's batches, each content is staged at most once: there is nothing for a transaction to
    deduplicate."""

    @abc.abstractmethod
    def staged_count(self) -> int:
        """How many of them staged their bytes (are new to the store)."""

    @abc.abstractmethod
    def move_chunks(self, per_call: int) -> Iterator[Sequence[tuple[str, str]]]:
        """The staged blobs' ``(staging name, digest)`` moves, at most ``per_call`` a chunk, in order; each chunk
        a sequence the executor's ``move_files`` takes (the core's without making its names)."""


class Reads(Sequence[Staged]):
    """A publish's reads, the executor's batches joined in order without copying them (a batch may be
    :class:`HeldReads`: a list of 10,000 ``Staged`` made of them would undo what holding them saves)."""

    def __init__(self) -> None:
        self.batches: list[Sequence[Staged]] = []
        self._starts = [0]

    def add(self, batch: Sequence[Staged]) -> None:
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


#: A file to read: ``(index in the tree, entry as captured, (st_dev, st_ino) as captured)``.
StageItem = tuple[int, FileMeta, tuple[int, int]]
Reader = Callable[..., SourceRead]


def stage_file(root: str, item: StageItem, txn_fd: int, has_blob: HasBlob, seen: set[str], *,
               read: Reader | None = None, in_memory: bool = False) -> Staged:
    """Read one source file once and stage its bytes if no blob (nor an earlier file here) holds them.
    ``has_blob``: the transaction's answer (:func:`~artifactkit.store.blob_check.blob_lookup`'s, for a directory),
    which checks a stored blob against the bytes read, so a damaged one is stored again; ``seen``: digests this
    publish staged already; ``in_memory``: a small file's new bytes are returned, not written to staging."""
    index, entry, identity = item
    stage_name = staging_name(index)
    # read_source looked up at each call, not bound as a default: the tests count reads by wrapping it.
    found = (read or read_source)(f"{root}/{entry.path}", entry, identity, stage_fd=txn_fd, stage_name=stage_name)
    # A stored blob is checked against the bytes in hand: the small file's, or the copy staged (and hashed) as read.
    held = found.data if found.data is not None else StagedCopy(txn_fd, stage_name, found.extents)
    is_new = found.sha256 not in seen and not has_blob(found.sha256, entry.size, held)
    data = None
    if is_new:
        if found.data is not None and in_memory:
            data = found.data
        elif found.data is not None:
            write_staged(txn_fd, stage_name, found.data)
        seen.add(found.sha256)
    elif found.data is None:
        os.unlink(stage_name, dir_fd=txn_fd)  # copied while hashing, but already stored
    return Staged(index, found.sha256, found.noatime, found.flags, found.extents, is_new, data)

"""One source file read once and staged: the per-file work of a publish, in the parent or a worker.

A module of its own, importing only what a read needs, because a worker process imports it at start-up
(its import time is paid by every publish that uses workers).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from artifactkit._fsutil import open_same_dir
from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.content import SourceRead, read_source, write_staged
from artifactkit.store.layout import HasBlob, blob_lookup


class Staged(NamedTuple):
    """One file's read, as the executor reports it (a tuple underneath: it is built once per file and
    crosses a worker's pipe). ``staged``: its bytes are new to the store and the first of their content
    in this executor, kept in staging at :meth:`path` (or, for a transaction ``in_memory``, in ``data``);
    ``stage_dir``: a worker's own directory in staging ("" for the parent's)."""

    position: int
    sha256: str
    noatime: bool
    flags: int | None
    extents: Extents | None
    staged: bool
    stage_dir: str
    data: bytes | None = None

    def path(self) -> str:
        """Where a staged file's bytes are, relative to the staging dir."""
        return f"{self.stage_dir}/blob-{self.position}" if self.stage_dir else f"blob-{self.position}"


#: What every batch of one publish shares: ``(source root, staging dir, its (st_dev, st_ino), blobs dir, its
#: (st_dev, st_ino), files to read in all)``.
StageShared = tuple[str, str, tuple[int, int], str, tuple[int, int], int]
#: A file to read: ``(index in the tree, entry as captured, (st_dev, st_ino) as captured)``.
StageItem = tuple[int, FileMeta, tuple[int, int]]
#: The same on the wire: only what the read checks (path, size, mtime_ns, ctime_ns, identity).
WireItem = tuple[int, str, int, int, int | None, int, int]
Reader = Callable[..., SourceRead]


def to_wire(item: StageItem) -> WireItem:
    """What a worker needs of an item: a tuple pickles in a fraction of a :class:`FileMeta`'s time."""
    index, entry, (dev, ino) = item
    return index, entry.path, entry.size, entry.mtime_ns, entry.ctime_ns, dev, ino


def from_wire(item: WireItem) -> StageItem:
    """The item a worker reads: the captured facts :func:`read_source` compares against."""
    index, path, size, mtime_ns, ctime_ns, dev, ino = item
    # Positional (model.FIELD_ORDER): the keywords cost as much as the object, once per file of a batch.
    return index, FileMeta(path, "file", 0, mtime_ns, 0, size, None, None, ctime_ns), (dev, ino)


def stage_file(root: str, item: StageItem, txn_fd: int, has_blob: HasBlob, seen: set[str], *,
               read: Reader | None = None, stage_dir: str = "", in_memory: bool = False) -> Staged:
    """Read one source file once and stage its bytes if no blob (nor an earlier file here) holds them.
    ``has_blob``: :func:`~artifactkit.store.layout.blob_lookup`'s answer; ``seen``: digests this process
    staged in this publish; ``in_memory``: a small file's new bytes are returned, not written to staging."""
    index, entry, identity = item
    stage_name = f"blob-{index}"
    # read_source looked up at each call, not bound as a default: the tests count reads by wrapping it.
    found = (read or read_source)(f"{root}/{entry.path}", entry, identity, stage_fd=txn_fd, stage_name=stage_name)
    is_new = found.sha256 not in seen and not has_blob(found.sha256, entry.size)
    data = None
    if is_new:
        if found.data is not None and in_memory:
            data = found.data
        elif found.data is not None:
            write_staged(txn_fd, stage_name, found.data)
        seen.add(found.sha256)
    elif found.data is None:
        os.unlink(stage_name, dir_fd=txn_fd)  # copied while hashing, but already stored
    return Staged(index, found.sha256, found.noatime, found.flags, found.extents, is_new, stage_dir, data)


def stage_batch(shared: StageShared, batch: Sequence[WireItem]) -> list[tuple[object, ...]]:
    """A worker's share of a publish: the staging dir is opened by path and must be the parent's inode.
    Each worker stages into a directory of its own there: creating files in one directory from several
    processes serializes on that directory's lock (measured: 1.25x from two processes, 1.6x apart)."""
    root, txn, identity, blobs_dir, blobs_identity, lookups = shared
    txn_fd = open_same_dir(txn, identity, "publish staging directory")
    try:
        own = f"worker-{os.getpid()}"
        with contextlib.suppress(FileExistsError):
            os.mkdir(own, 0o700, dir_fd=txn_fd)
        own_fd = os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=txn_fd)
        try:
            state = _PUBLISHES.get((txn, identity))
            if state is None:  # once per publish: a listing taken here answers every later batch
                state = _PUBLISHES[(txn, identity)] = (set(), _lasting_lookup(blobs_dir, blobs_identity, lookups))
            seen, has_blob = state
            # Plain tuples back over the pipe: a NamedTuple pickles as its class and arguments, 3.7x the time.
            return [tuple(stage_file(root, from_wire(item), own_fd, has_blob, seen, stage_dir=own))
                    for item in batch]
        finally:
            os.close(own_fd)
    finally:
        os.close(txn_fd)


def _lasting_lookup(blobs_dir: str, identity: tuple[int, int], lookups: int) -> HasBlob:
    """:func:`blob_lookup` on the parent's blobs dir (whether a blob exists decides whether bytes are
    staged: it is opened by path and must be the parent's inode), its descriptor kept open for the batches
    after this one: a ``stat`` each needs it, and this process serves one publish and dies with it."""
    return blob_lookup(open_same_dir(blobs_dir, identity, "the store's blobs directory", nofollow=False), lookups)


#: Per publish, the digests a worker staged and its answer to "is this blob stored" (a worker serves one
#: publish; its batches share them).
_PUBLISHES: dict[tuple[str, tuple[int, int]], tuple[set[str], HasBlob]] = {}

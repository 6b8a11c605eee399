"""Whether a stored blob holds the content its name says: asked by a publish of every blob it deduplicates against.

A name in ``blobs/`` is a claim that anyone who can write the store can make: a blob replaced by same-size wrong
bytes (planted, or rotted on the disk) passed every check of kind and size, and every later publish of that
content said "published" for a version no download could restore. So a publish trusts an existing blob only
once its bytes are proven to be the content: compared with the bytes the publish has in hand — a small file's
bytes, a larger one's staged copy, which the read hashed as it was written — or, where the source was not read
(a stat cache hit), hashed. Compared rather than hashed where the bytes are in hand: a ``memcmp`` beside a
``pread`` costs less than a sha256 of the same bytes (Python here: 2.1 against 0.7 GB/s on a staged copy of
256 MiB; the native core compares too), and it is as exact, since those bytes hashed to the name. A damaged blob
is replaced by the publish's own bytes, as a missing one is stored (staged, then renamed over it; a bucket's
object is PUT again), and named in a :class:`~artifactkit.errors.RepairedBlobsWarning`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Final, NamedTuple, Protocol

import attrs

from artifactkit.engine.content import CHUNK, IN_MEMORY_LIMIT, open_regular, read_small, sha256_of_fd
from artifactkit.metadata.extended import data_extents
from artifactkit.metadata.model import Extents

#: Listing ``blobs/`` costs about a tenth of a ``stat`` per name listed (on tmpfs: 0.3 against 2.5 us; a ``stat``
#: of a missing name, with its FileNotFoundError, 4.1 us): :func:`blob_lookup` lists it when that is cheaper than
#: this many looks per name it will be asked about.
LIST_BLOBS_PER_LOOKUP: Final = 4


class StagedCopy(NamedTuple):
    """A file's bytes as a publish staged them: ``name`` in the directory ``dir_fd``, with the source's data runs
    (``None``: dense)."""

    dir_fd: int
    name: str
    extents: Extents | None


#: What a publish has of a file's content when it asks about its blob: the bytes, the staged copy, or nothing.
Held = bytes | StagedCopy | None


class HasBlob(Protocol):
    """Whether the store holds a blob, asked by a publish of each content it read or a stat cache vouches for
    (:class:`BlobLookup` for a directory, the bucket's transaction's own): true only once the blob is proven to
    hold that content (compared with ``held``, the bytes the publish has in hand, or hashed where it has none). A
    blob under the name that holds anything else is *damaged*: the answer is false, so the publish stores its own
    bytes over it, and a damaged name the publish had the bytes of is in :attr:`repaired`."""

    #: Names found damaged while the publish held their content, which it therefore stores again.
    repaired: set[str]

    def __call__(self, sha: str, size: int | None, held: Held = None, /) -> bool: ...


#: :func:`blob_holds`' answer for a name that holds something else than its content, or no regular file.
DAMAGED: Final = False


def blob_holds(blobs_fd: int, sha: str, size: int | None, held: Held) -> bool | None:
    """Whether ``blobs/<sha>`` holds the content ``sha`` (of ``size`` bytes where known): compared with ``held``,
    or hashed where the publish has nothing in hand. ``None``: nothing is there. A FIFO, a device or any other
    non-file under the name is never opened (:func:`~artifactkit.engine.content.open_regular`); one this process
    may not read is damaged too, since no download of it by this user could read it either."""
    try:
        fd, st = open_regular(sha, dir_fd=blobs_fd)
    except FileNotFoundError:
        return None
    except PermissionError:
        return DAMAGED
    if fd is None:
        return DAMAGED
    try:
        if isinstance(held, bytes):
            size = len(held)
        if size is not None and st.st_size != size:
            return DAMAGED
        if held is None and st.st_size <= IN_MEMORY_LIMIT:  # one read, no 1 MiB buffer made per blob
            data = read_small(fd, st.st_size)
            return len(data) == st.st_size and hashlib.sha256(data).hexdigest() == sha
        if held is None:
            return sha256_of_fd(fd)[0] == sha
        if isinstance(held, bytes):
            return read_small(fd, size or 0) == held
        return same_as_copy(fd, held, st.st_size)
    finally:
        os.close(fd)


def same_as_copy(fd: int, copy: StagedCopy, size: int) -> bool:
    """Whether the ``size`` bytes of ``fd`` are those of the staged ``copy`` (of as many bytes). Only where
    either has data are they read: where both have holes, both read as zeros (a sparse file of 1 TiB with a
    few runs costs its runs, not a terabyte of zeros)."""
    other = os.open(copy.name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=copy.dir_fd)
    try:
        if os.fstat(other).st_size != size:
            return False
        runs = ((0, size),) if copy.extents is None else union(copy.extents, data_extents(fd, size) or ((0, size),))
        for start, length in runs:
            at, end = start, start + length
            while at < end:
                step = min(CHUNK, end - at)
                mine = os.pread(fd, step, at)
                if not mine or mine != os.pread(other, step, at):
                    return False
                at += len(mine)
        return True
    finally:
        os.close(other)


def union(first: Extents, second: Extents) -> list[tuple[int, int]]:
    """The ranges covered by either list of ``(start, length)`` runs, merged, in order."""
    merged: list[tuple[int, int]] = []
    for start, length in sorted((*first, *second)):
        if merged and start <= merged[-1][0] + merged[-1][1]:
            last_start, last_length = merged[-1]
            merged[-1] = (last_start, max(last_length, start + length - last_start))
        elif length:
            merged.append((start, length))
    return merged


def blob_lookup(blobs_fd: int, lookups: int) -> BlobLookup:
    """Whether a blob is in the store, for about ``lookups`` questions: one listing of ``blobs/`` if that is
    cheaper than a look at each name, else a look at each (a name the listing lacks is absent, unlooked at). A
    directory's size bounds its entries from above: at least 20 bytes each on tmpfs (its exact figure), ext4,
    xfs and btrfs. A name that is there is checked by content (:func:`blob_holds`).

    The caller holds the store's lock, so ``gc`` (which takes it exclusively) cannot remove a blob between an
    answer and the commit. A listing can only miss a blob a concurrent publisher adds after it: that
    content is then staged again and its rename swaps in the same bytes, as when both publish at once.
    """
    if lookups == 0 or os.fstat(blobs_fd).st_size // 20 > LIST_BLOBS_PER_LOOKUP * lookups:
        return BlobLookup(blobs_fd, None)
    return BlobLookup(blobs_fd, frozenset(os.listdir(blobs_fd)))


@attrs.define(eq=False)
class BlobLookup:
    """:func:`blob_lookup`'s answer over a ``blobs/`` fd (:class:`HasBlob`): ``names``
    is its one listing (``None``: a look at each name), kept as a value so an engine answering the question
    itself (the native core) asks exactly as this does, with the same listing. Each name is checked once per
    publish: its verdict is kept (a stat cache's hit, hashed, and a later read of the same content agree)."""

    blobs_fd: int
    names: frozenset[str] | None
    repaired: set[str] = attrs.field(factory=set)
    _verdicts: dict[str, bool | None] = attrs.field(factory=dict)

    def __call__(self, sha: str, size: int | None, held: Held = None, /) -> bool:
        if self.names is not None and sha not in self.names:
            return False
        if sha in self._verdicts:
            verdict = self._verdicts[sha]
        else:
            verdict = self._verdicts[sha] = blob_holds(self.blobs_fd, sha, size, held)
        if verdict is DAMAGED and held is not None:
            self.repaired.add(sha)
        return bool(verdict)

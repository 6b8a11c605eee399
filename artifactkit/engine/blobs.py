"""The blobs a download reads (:class:`BlobsNeeded`, a backend's question) and where it reads them from
(:class:`BlobSource`, its answer, the restore's input)."""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

from artifactkit.engine.content import open_blob, open_regular


@attrs.frozen
class BlobSource:
    """The blobs of a download: a directory (``blob_path(sha)`` is ``directory/sha``). With ``dir_fd`` (the
    directory as this process opened and checked it), each blob is read through that fd, never by the path a
    writer of the store could have swapped since; without one, by path, and every byte read is
    digest-checked, so a swap there can only fail the download."""

    directory: str
    dir_fd: int | None = None
    #: Another restore seam's ``blob_path`` (tests' faulty steps): blobs opened by the path it gives.
    opener: Callable[[str], str] | None = None

    def __call__(self, sha: str) -> str:
        # os.path.join cost a tenth of the per-file Python work
        if self.opener is not None:
            return self.opener(sha)
        return f"/proc/self/fd/{self.dir_fd}/{sha}" if self.dir_fd is not None else f"{self.directory}/{sha}"

    def open(self, sha: str, *, path: str) -> tuple[int, os.stat_result]:
        """The blob opened for reading, with its ``fstat``, through ``dir_fd`` where there is one (an ``openat`` on
        it costs half an open by path: 1.4 against 2.8 us on tmpfs); :class:`IntegrityError` if it is missing, a
        link or no regular file, which is never opened (:func:`~artifactkit.engine.content.open_regular`)."""
        name, dir_fd = (sha, self.dir_fd) if self.dir_fd is not None else (self(sha), None)
        try:
            fd, st = open_regular(name, dir_fd=dir_fd)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            return fd, st
        # open_blob says what is wrong with it (or opens it, if it appeared meanwhile); the message is built only
        # here: a download formats nothing per file that succeeds.
        fd = open_blob(name, sha, where=f"for {path!r}", dir_fd=dir_fd, entry=path)
        return fd, os.fstat(fd)


@attrs.frozen
class BlobsNeeded:
    """The blobs a download reads: how many and their bytes, which a local store (it holds them all) and the
    progress report only count, and ``{sha256: size}`` made by :meth:`digests` for a backend that fetches them:
    of 10,000 files, that mapping was 1-2 ms of a download's serial time that a local store never used."""

    count: int
    size: int
    #: Makes the mapping (called by :meth:`digests`): the core's parse makes it from its own entries.
    make: Callable[[], dict[str, int]]

    @classmethod
    def of(cls, digests: dict[str, int]) -> BlobsNeeded:
        return cls(len(digests), sum(digests.values()), lambda: digests)

    def digests(self) -> dict[str, int]:
        """``{sha256: size}`` of every blob (a digest a hostile manifest names with two sizes: its last)."""
        return self.make()

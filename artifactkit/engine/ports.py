"""What the per-file work takes from a store, declared here so that the engine room never imports the store (it
sits below it): the store's own classes (:class:`~artifactkit.store.backend.PublishTxn`,
:class:`~artifactkit.store.stat_cache.StatCache`) satisfy these protocols as they are, and the type checker holds
them to it. A scan's questions to a stat cache are :class:`~artifactkit.engine.values.CacheHits`; whether a blob is
stored, :class:`~artifactkit.engine.blob_check.HasBlob`, beside its answer for a directory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from artifactkit.metadata.model import Extents, FileMeta

if TYPE_CHECKING:
    from artifactkit.engine.blob_check import HasBlob
    from artifactkit.manifest.artifact_ref import ArtifactRef


class StagingTxn(Protocol):
    """What the per-file work and the plan take of one publish's transaction (the store's
    :class:`~artifactkit.store.backend.PublishTxn`): where blobs are staged, and which the store holds."""

    #: The directory the engine stages blobs into.
    stage_fd: int
    #: The store's blob directory as this process opened and checked it (``-1``: none): identity and has-blob
    #: answers come from it, never from the path, which a writer of the store could have swapped since.
    blobs_fd: int
    #: Whether the engine keeps a small file's bytes in memory (``Staged.data``) instead of staging them.
    in_memory: bool

    def blob_lookup(self, lookups: int) -> HasBlob:
        """``has_blob(sha, size, held)`` for about ``lookups`` questions: whether the store holds ``sha``, checked
        by content (:mod:`~artifactkit.engine.blob_check`), names taken from one listing where that is cheaper; a
        damaged blob is stored again by the publish and listed in ``has_blob.repaired`` once it is flushed."""


@attrs.frozen
class CachedRead:
    """What an earlier read of an unchanged file found: its digest, inode flags and data extents."""

    sha256: str
    flags: int | None
    extents: Extents | None


class PlanCache(Protocol):
    """What the plan asks a stat cache (:class:`~artifactkit.store.stat_cache.StatCache`)."""

    def unchanged_manifest(self, read_manifest: Callable[[ArtifactRef], bytes], name: str, entries: int,
                           source_read_noatime: bool, has_blob: HasBlob) -> tuple[bytes, str] | None:
        """The recorded version's manifest and digest, read with ``read_manifest``, if it is this publish's."""

    def matched_lines(self, paths: list[str]) -> tuple[dict[str, tuple[str, str | None]], list[str]]:
        """The hits of entries whose whole listing matched, and the paths that must be captured again."""

    def lookup(self, entry: FileMeta, identity: tuple[int, int]) -> CachedRead | None:
        """A content hit: the recorded read of this exact inode state, or ``None`` (read it)."""

    def forget(self, path: str) -> None:
        """An entry hit that cannot be used after all (its blob is gone): it is captured and read."""


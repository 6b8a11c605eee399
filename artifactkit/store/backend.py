"""The seam between the one :class:`~artifactkit.store.store.Store` and where a store's bytes live.

A backend holds only what differs between a directory and a bucket (restic's ``backend.Backend``,
borgstore's ``BackendBase``): listing versions, reading a manifest's bytes, claiming a version, the blobs
(has / stage / fetch / hash / delete), the publish and gc guards, a download's hold on its version and forget's
guard, and the durability barrier. Everything
written once above it — resolve, list, manifest, verify's mark, gc's sweep, the publish stages and the
version-claim loop — lives in the store's own modules and never asks which backend it has.

A backend is chosen from the URL scheme by :mod:`artifactkit.store.store`'s registry of dotted names,
imported on first use. A new one goes in a module of its own implementing :class:`Backend` and one line
of that registry; nothing here imports an implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import attrs

from artifactkit.engine.ports import StagingTxn

if TYPE_CHECKING:
    from artifactkit.engine.blobs import BlobsNeeded, BlobSource
    from artifactkit.engine.values import ReadBatch
    from artifactkit.manifest.artifact_ref import ArtifactRef
    from artifactkit.store.needed_blobs import NeededBlobs
    from artifactkit.store.progress import Reporter
    from artifactkit.store.stat_cache import StatCache


@attrs.frozen
class Garbage:
    """One thing ``gc`` may remove: its name as reported (a blob's digest, a staging entry's name), the bytes its
    removal gives back, and its age (local: since its ctime; bucket: since it was written or its upload began,
    by the server's clock), which ``gc``'s grace compares."""

    name: str
    freed_bytes: int
    age_s: float = 0.0

    def young(self, grace_s: float) -> bool:
        """Whether a grace of ``grace_s`` keeps it. A grace of 0 keeps nothing, not even what was written this
        second (a bucket's clock has 1 s resolution: "older than now" would keep that)."""
        return grace_s > 0 and self.age_s < grace_s


class Forgetter(Protocol):
    """What :meth:`Opened.forgetting` yields: the removal of versions, under the guard it holds."""

    def remove(self, refs: Sequence[ArtifactRef]) -> None:
        """Remove every version of ``refs`` from the list, each by one unlink or DELETE of its manifest — or none
        of them: :class:`~artifactkit.errors.VersionInUseError` if a running download holds one. A name whose
        newest version goes keeps a marker of its number, so no later publish gets that number again."""


class Guard(Protocol):
    """A held publish or gc guard (local: an ``flock``; bucket: a lease object refreshed while held)."""

    def check(self) -> None:
        """Raise if the guard may have lapsed: before a commit and before each delete nothing may act on one."""


class PublishTxn(StagingTxn, Protocol):
    """One publish in flight: where its files are staged (what the engine takes of it, :class:`StagingTxn`), and
    how they become a visible version."""

    #: The staging directory as a path (a bucket's client uploads a staged file by its path).
    stage_path: str

    def add(self, staged: ReadBatch) -> None:
        """Blobs this publish read and staged: a directory keeps them for :meth:`flush`, a bucket uploads them
        now, overlapping the reads still to come."""

    def spill(self) -> None:
        """Let go of what is held of the batches added so far (a publish in parts, after each part): a directory
        keeps only their moves, in a file of its staging; a bucket, which sent them as they came, holds nothing."""

    def seal(self, move: Mover) -> None:
        """Every blob is added: a directory makes them durable now (one ``syncfs``, the barrier; none where no
        blob was staged) and starts
        ``move`` — the engine's :meth:`~artifactkit.engine.protocol.Engine.move_files` — renaming them into
        ``blobs/`` on a thread of its own, while the caller assembles the manifest; a bucket, whose uploads land
        under their final keys, has nothing to do."""

    def flush(self, body: bytes) -> None:
        """Every added blob and the manifest ``body`` are stored for good (local: the sealed blobs renamed into
        place, the manifest written and fsynced, ``blobs/`` fsynced; bucket: every upload finished). Nothing is
        visible yet but blobs, which nothing refers to until a version is claimed."""

    def latest(self, name: str) -> int:
        """The highest version of ``name`` now (0 if none)."""

    def claim(self, name: str, version: int, body: bytes, digest: str) -> bool:
        """Make the flushed manifest version ``version`` of ``name`` atomically, never replacing one: False if
        that version is taken (the caller tries the next)."""


#: :meth:`~artifactkit.engine.protocol.Engine.move_files`: ``(src_fd, dst_fd, [(src, dst), ...])``.
Mover = Callable[[int, int, Sequence[tuple[str, str]]], None]


class Opened(Protocol):
    """A backend opened for one operation (a local store's checked directory fds; a bucket's client)."""

    #: How the store is named in messages (a root directory or an ``s3://`` URL).
    where: str
    #: How many manifests or blobs are worth reading at once (1: a local disk; a bucket: its requests).
    concurrency: int
    #: The grace ``gc`` gives a leftover when none is asked for, and ``verify`` names: 0 for a local store (its
    #: lock proves no publisher runs), the lease policy's ``grace_s`` for a bucket (docs/s3.md).
    default_grace_s: float
    #: Where :meth:`staging_garbage`'s names live, as reports name them (``staging``; a bucket's ``uploads``).
    staging_dir: str

    def versions(self, name: str | None = None) -> list[tuple[str, int]]:
        """``(name, version)`` of every visible version (of ``name`` only, if given), sorted; nothing read."""

    def ref(self, name: str, version: int) -> ArtifactRef | None:
        """The version's ref with its manifest digest (from its name, or its pinned metadata), ``None`` if it
        vanished; :class:`IntegrityError` or :class:`ManifestLimitError` if its manifest cannot be read."""

    def manifest_bytes(self, ref: ArtifactRef, *, check_digest: bool = True) -> tuple[bytes, str]:
        """The manifest's bytes (bounded by the manifest limit) and where they were read, for messages; they
        hash to ``ref.digest`` (else :class:`IntegrityError`) unless ``check_digest`` is false, which only a
        caller passes that checks the digest itself (:func:`~artifactkit.store.manifest_file.verified_manifest`
        and ``verified_entries``): a download's native parse hashes them on a thread of its own meanwhile."""

    def tree_object(self, digest: str) -> bytes:
        """The stored bytes of the tree object ``digest`` (a format-3 manifest's; kept in the blob directory), at most
        the manifest limit (else :class:`ManifestLimitError`); :class:`IntegrityError` (``MISSING``) if absent,
        (``CORRUPT``) if no regular object. Their digest is the reader's to check
        (:mod:`~artifactkit.manifest.tree_read`)."""

    def blob_digest(self, sha: str, sizes: Collection[int]) -> tuple[int, str | None]:
        """Read the stored blob ``sha``: its size, and the sha256 of its bytes if the size is one of ``sizes``
        (else ``None``: a wrong size is reported, never hashed). :class:`IntegrityError` (``MISSING``) if it is
        absent, (``CORRUPT``) if it is no regular object."""

    def quiescent(self) -> AbstractContextManager[Callable[[], bool]]:
        """Held while verify lists the store; what it yields, called at the end of the listing, says whether no
        publisher was active meanwhile (leftovers are then orphaned, not in progress)."""

    def publishing(self) -> AbstractContextManager[tuple[Guard, PublishTxn]]:
        """The publish guard (shared among publishers, excluding gc) and a staging transaction under it."""

    def save_stat_cache(self, cache: StatCache, ref: ArtifactRef, order: list[str]) -> None:
        """Keep what this publish read for the next (a failure only loses the hint)."""

    def collecting(self) -> AbstractContextManager[Guard]:
        """The gc guard: no publisher runs (or commits) while it is held."""

    def staging_garbage(self, *, measure: bool = True) -> list[Garbage]:
        """Every staging leftover (a killed publish's directory; a bucket's unfinished multipart uploads) with its
        age and, if ``measure``, the bytes it frees (verify, which frees nothing, does not walk them)."""

    def blob_garbage(self, needed: NeededBlobs, *, measure: bool = True) -> list[Garbage]:
        """Every blob none of ``needed`` is, with its age and (``measure``) the bytes it frees: the listing is
        streamed through ``needed`` (never held whole), only what it finds is kept."""

    def remove_staging(self, guard: Guard, staging: Sequence[Garbage]) -> None:
        """Remove what :meth:`staging_garbage` found."""

    def remove_blobs(self, guard: Guard, blobs: Sequence[Garbage]) -> None:
        """Remove what :meth:`blob_garbage` found, checking ``guard`` before each batch of deletes."""

    def holding(self, name: str, version: int) -> AbstractContextManager[None]:
        """Hold ``name@version`` for the block, so no ``forget`` removes it meanwhile (a download holds it from
        before it reads the manifest until its last blob is read): local, a shared ``flock`` on the manifest file;
        bucket, a lease ``locks/download/<name>/<version>/<token>``. :class:`LookupError` if it is gone."""

    def forgetting(self, names: Collection[str]) -> AbstractContextManager[Forgetter]:
        """The guard a ``forget`` of versions of ``names`` holds while it lists and removes them: local, those
        names' locks (a publisher's claim takes them too); bucket, the gc lease (publishers wait) and
        ``locks/forget`` (downloads wait to take their leases)."""

    def blob_source(self, needed: BlobsNeeded, dest: str, progress: Reporter) -> AbstractContextManager[BlobSource]:
        """Where a download to ``dest`` reads the blobs ``needed``: the store's own directory,
        or a private directory beside ``dest`` the blobs were fetched into and checked in (``progress`` told
        of each as it lands)."""


class Backend(Protocol):
    """Where a store lives: built from its URL, opened once per operation."""

    #: The URL or path the store was given, as :class:`Store.root` shows it.
    root: str

    @property
    def retries(self) -> int:
        """Requests sent again after a transient failure so far (a bucket's; a directory's are never sent)."""

    def check_site(self) -> None:
        """Before a publish's scan: refuse at once where no store is and none can be made (a path holding
        other files, a missing bucket), so nothing is read for nothing."""

    def stat_cache(self, started_ns: int) -> StatCache:
        """The stat cache of what earlier publishes read, loaded before the scan (``started_ns``: the inode
        clock sampled before it, the racy rule's reference)."""

    def open(self, *, create: bool = False, writes: bool = False) -> AbstractContextManager[Opened]:
        """The store checked and opened; a path that is no store is :class:`NotAStoreError`. ``create``: the
        store is made first where nothing is (a publish); ``writes``: the operation changes the store, so
        what an older store's layout lacks may be made (never a new store)."""

"""``gc``, written once for every backend: under the gc guard, remove abandoned staging, read every manifest
(verify's mark), and sweep the blobs none needs — all but what is younger than the grace, which is kept and
reported as kept.

What gc holds: verify's mark (:func:`~artifactkit.store.verify.mark`: a tree object at a time, what is needed sorted
on a temporary file), and the garbage it found, each with its age and size: as many as it removes or keeps."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import attrs

from artifactkit.errors import IntegrityError
from artifactkit.store.backend import Garbage, Opened
from artifactkit.store.progress import Reporter
from artifactkit.store.verify import mark


@attrs.frozen
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove), and what it kept for being young.

    ``freed_bytes`` is the space given back: a local store's blocks of every removed inode whose last name it
    removed (``st_blocks`` x 512, so a sparse blob counts its data, not its holes), in ``blobs/`` and in
    ``staging/`` alike — a killed publish's staged blobs are most of what it leaves; a bucket's object sizes.
    ``kept_blobs`` and ``kept_staging`` are leftovers younger than ``grace_s``, ``kept_bytes`` what they hold, and
    ``kept_wait_s`` how long until the youngest of them is old enough (0 when nothing was kept).
    """

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int
    dry_run: bool = False
    kept_blobs: list[str] = attrs.field(factory=list)
    kept_staging: list[str] = attrs.field(factory=list)
    kept_bytes: int = 0
    kept_wait_s: float = 0.0
    grace_s: float = 0.0


def _split(items: Sequence[Garbage], grace_s: float) -> tuple[list[Garbage], list[Garbage]]:
    """``items`` old enough to remove, and those the grace keeps."""
    return [item for item in items if not item.young(grace_s)], [item for item in items if item.young(grace_s)]


def collect_garbage(opened: Opened, *, grace_s: float | None = None, dry_run: bool = False,
                    progress: Reporter | None = None) -> GcReport:
    """Remove staging leftovers and unreferenced blobs at least ``grace_s`` old (``None``: the backend's
    default), excluding every publisher meanwhile.

    Every removal goes through the backend (a local store's checked fds, which nothing outside the store can
    be reached through; a bucket's deletes, each batch after the lease is checked). An unreadable or corrupt
    manifest stops the blob sweep: nobody can say which blobs it needs. ``dry_run``: the same answer,
    nothing removed.
    """
    grace = opened.default_grace_s if grace_s is None else grace_s  # one below 0 keeps nothing, as 0
    with opened.collecting() as guard:
        staging, young_staging = _split(opened.staging_garbage(), grace)
        if not dry_run:
            opened.remove_staging(guard, staging)
        progress = progress or Reporter(None)
        _, needed, corrupt, unreadable = mark(opened, progress)
        with contextlib.closing(needed):
            if corrupt or unreadable:
                raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                                     + "; ".join(corrupt + unreadable), path=opened.where)
            blobs, young_blobs = _split(opened.blob_garbage(needed), grace)
        progress.phase("sweep", entries_total=len(blobs), bytes_total=sum(item.freed_bytes for item in blobs))
        if not dry_run:
            opened.remove_blobs(guard, blobs)
        progress.advance(len(blobs), sum(item.freed_bytes for item in blobs))
    kept = young_blobs + young_staging
    return GcReport(removed_blobs=[item.name for item in blobs], removed_staging=[item.name for item in staging],
                    freed_bytes=sum(item.freed_bytes for item in blobs + staging), dry_run=dry_run,
                    kept_blobs=[item.name for item in young_blobs], kept_staging=[item.name for item in young_staging],
                    kept_bytes=sum(item.freed_bytes for item in kept),
                    kept_wait_s=max((grace - item.age_s for item in kept), default=0.0), grace_s=grace)

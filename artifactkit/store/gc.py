"""``gc``, written once for every backend: under the gc guard, remove abandoned staging, read every manifest
(verify's mark), and sweep the blobs none needs."""

from __future__ import annotations

import attrs

from artifactkit.errors import IntegrityError
from artifactkit.store.backend import Opened
from artifactkit.store.progress import Reporter
from artifactkit.store.verify import mark


@attrs.frozen
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove).

    ``freed_bytes`` is the space given back: a local store's blocks of every removed inode whose last name it
    removed (``st_blocks`` x 512, so a sparse blob counts its data, not its holes), in ``blobs/`` and in
    ``staging/`` alike — a killed publish's staged blobs are most of what it leaves; a bucket's object sizes.
    """

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int
    dry_run: bool = False


def collect_garbage(opened: Opened, *, dry_run: bool = False, progress: Reporter | None = None) -> GcReport:
    """Remove staging leftovers and unreferenced blobs, excluding every publisher meanwhile.

    Every removal goes through the backend (a local store's checked fds, which nothing outside the store can
    be reached through; a bucket's deletes, each batch after the lease is checked). An unreadable or corrupt
    manifest stops the blob sweep: nobody can say which blobs it needs. ``dry_run``: the same answer,
    nothing removed.
    """
    with opened.collecting() as guard:
        staging = opened.staging_garbage()
        if not dry_run:
            opened.remove_staging(guard, staging)
        progress = progress or Reporter(None)
        _, needed, corrupt, unreadable = mark(opened, progress)
        if corrupt or unreadable:
            raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                                 + "; ".join(corrupt + unreadable), path=opened.where)
        blobs = opened.blob_garbage(needed)
        progress.phase("sweep", entries_total=len(blobs), bytes_total=sum(item.freed_bytes for item in blobs))
        if not dry_run:
            opened.remove_blobs(guard, blobs)
        progress.advance(len(blobs), sum(item.freed_bytes for item in blobs))
    return GcReport(removed_blobs=[item.name for item in blobs], removed_staging=[item.name for item in staging],
                    freed_bytes=sum(item.freed_bytes for item in blobs + staging), dry_run=dry_run)

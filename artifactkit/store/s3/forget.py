"""A bucket's side of ``forget``: remove versions, each by one DELETE of its manifest key, under ``locks/gc``
(no publisher claims a number meanwhile) and ``locks/forget`` (no download takes a lease meanwhile).

Both sides of the download hold *write, then look* (:mod:`~artifactkit.store.s3.leases`): a download writes
``locks/download/<name>/<version>/<token>`` and then looks at ``locks/forget``; forget writes ``locks/forget``
and then lists the downloads' leases. With read-after-write consistency one of two racers sees the other: the
download steps aside until the forget is over (and then finds its version gone, or still there), or the forget
sees the download's lease and removes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from artifactkit.errors import VersionInUseError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.backend import Guard
from artifactkit.store.s3.layout import forgotten_key, listed_versions, manifest_key
from artifactkit.store.s3.leases import live_downloads
from artifactkit.store.s3.objects import Bucket


class BucketForgetter:
    """Removes versions of a bucket store while ``guards`` (its leases) are held; each is checked before a write."""

    def __init__(self, bucket: Bucket, ttl_s: float, guards: Sequence[Guard]) -> None:
        self.bucket = bucket
        self.ttl_s = ttl_s
        self.guards = guards

    def _check(self) -> None:
        for guard in self.guards:
            guard.check()  # never delete after a lease may have lapsed

    def remove(self, refs: Sequence[ArtifactRef]) -> None:
        names = sorted({ref.name for ref in refs})
        held = {name: live_downloads(self.bucket, self.ttl_s, name) for name in names}
        busy = [str(ref) for ref in refs if ref.version in held[ref.name]]
        if busy:
            raise VersionInUseError(f"forget removed nothing: a running download holds {', '.join(busy)}; run it "
                                    "again once the download is over", versions=busy)
        for name in names:
            gone = max(ref.version for ref in refs if ref.name == name)
            if gone >= max((version for _, version in listed_versions(self.bucket, name)), default=0):
                self._check()
                self.bucket.put(forgotten_key(name, gone), b"")  # before the DELETE: the number stays taken
        for ref in refs:
            self._check()
            self.bucket.delete(manifest_key(ref.name, ref.version))

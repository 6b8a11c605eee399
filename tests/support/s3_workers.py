"""Top-level functions for ``spawn`` children that act as separate machines sharing one bucket store.

Each works in its own directory and shares nothing local with the parent or its siblings: only
the bucket (and the standard AWS environment it inherited).
"""

from __future__ import annotations

import os
import random
import time

from artifactkit import FileMeta, Store
from artifactkit.conformance.corpus import materialize
from artifactkit.store.s3.leases import LeasePolicy


def publish_corpus(workdir: str, url: str, corpus: str, name: str) -> tuple[int, str, list[FileMeta]]:
    """Materialize ``corpus`` here and publish it: (version, digest, the metadata as supplied)."""
    os.chdir(workdir)
    supplied = materialize(corpus, os.path.join(workdir, "src"))
    ref = Store(url).publish(os.path.join(workdir, "src"), name)
    return ref.version, ref.digest, list(supplied)


def download(workdir: str, url: str, ref: str) -> str:
    """Download ``ref`` here (the parent reads it back, so nothing here moves a link's atime first)."""
    os.chdir(workdir)
    return str(Store(url).download(ref, os.path.join(workdir, "out")))


def _pool_file(index: int) -> bytes:
    return f"pool content {index}\n".encode() * (1 + index % 7)


def churn_publisher(url: str, workdir: str, seed: int, duration_s: float, ttl_s: float) -> int:
    """Publish trees mixing fresh content with a pool that gc keeps sweeping, until the time is up."""
    rng = random.Random(seed)
    store = Store(url, policy=LeasePolicy(ttl_s=ttl_s, grace_s=-60, wait_s=60))
    end = time.monotonic() + duration_s
    count = 0
    while time.monotonic() < end:
        src = os.path.join(workdir, f"src-{count}")
        os.makedirs(src)
        for index in rng.sample(range(40), 4):
            with open(os.path.join(src, f"pool-{index}"), "wb") as out:
                out.write(_pool_file(index))
        with open(os.path.join(src, "fresh"), "w") as out:
            out.write(f"{seed}-{count}-{rng.random()}")
        store.publish(src, f"churn-{seed % 2}")
        count += 1
    return count


def orphan_planter(url: str, duration_s: float) -> int:
    """Upload pool blobs that no version may reference yet: what a publisher then skips (HEAD) and gc sweeps."""
    import hashlib

    store = Store(url)
    end = time.monotonic() + duration_s
    count = 0
    while time.monotonic() < end:
        data = _pool_file(count % 40)
        sha = hashlib.sha256(data).hexdigest()
        store.bucket.put(f"blobs/{sha}", data, sha256=sha)  # type: ignore[attr-defined]
        count += 1
    return count


def gc_loop(url: str, duration_s: float, ttl_s: float) -> tuple[int, int]:
    """Run gc over and over with the grace period off (only the leases protect): (runs, blobs removed).

    Between two runs it leaves the bucket to the publishers for two of their polls (``leases._POLL_S``): a
    publisher that stepped aside for gc looks again every poll, and gc back to back with no gap at all (now
    that a run takes ~0.1 s) starved them, so a churn of 8 s published 5 versions one time and 11 the next.
    That is a limit of the protocol under a gc that never stops, named in docs/s3.md; the test is about
    what gc and publishers do when they meet, and they still meet in every run.
    """
    from artifactkit.store.s3.leases import _POLL_S

    store = Store(url, policy=LeasePolicy(ttl_s=ttl_s, grace_s=-60, wait_s=60))
    end = time.monotonic() + duration_s
    runs = removed = 0
    while time.monotonic() < end:
        removed += len(store.gc().removed_blobs)
        runs += 1
        time.sleep(2 * _POLL_S)
    return runs, removed

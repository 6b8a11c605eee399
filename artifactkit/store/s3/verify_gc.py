"""``verify`` and ``gc`` on a shared bucket: every manifest read, every blob hashed or swept under the gc lease."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Final

from artifactkit.errors import ArtifactkitError, IntegrityError, IntegrityFailure
from artifactkit.store.content import CHUNK
from artifactkit.store.gc import GcReport
from artifactkit.store.layout import ArtifactRef
from artifactkit.store.s3.layout import SHA_RE, blob_key, fetch_version, listed_versions, parse_version
from artifactkit.store.s3.leases import LeasePolicy, gc_lease, live_publishers
from artifactkit.store.s3.objects import Bucket, ObjectInfo
from artifactkit.store.verify import VerifyReport

WORKERS: Final = 8


#: blob digest -> ``(name@version:path, size recorded)`` of every entry that needs it.
Needed = dict[str, list[tuple[str, int]]]


def _read_version(bucket: Bucket, name: str, version: int) -> tuple[ArtifactRef | None, list[tuple[str, str, int]],
                                                                    str]:
    """(ref, (sha, path, size) of its files, problem) for one manifest key; problem is "" or
    "corrupt: ..."/"unreadable: ..."."""
    try:
        found = fetch_version(bucket, name, version)
        if found is None:
            return None, [], ""
        ref, body = found
        manifest = parse_version(ref, body, where=bucket.url(f"manifests/{name}/{version}.json"))
    except IntegrityError as err:
        kind = "corrupt" if getattr(err, "failed", None) == IntegrityFailure.CORRUPT else "unreadable"
        return None, [], f"{kind}: manifest {name}@{version}: {err}"
    except ArtifactkitError as err:
        return None, [], f"unreadable: manifest {name}@{version}: {err}"
    return ref, [(e.sha256, e.path, e.size) for e in manifest.files() if e.sha256 is not None], ""


def mark(bucket: Bucket, pool: ThreadPoolExecutor) -> tuple[int, Needed, list[str], list[str]]:
    """Read every manifest: (versions, blob -> users with the size each records, corrupt, unreadable)."""
    needed: Needed = {}
    corrupt: list[str] = []
    unreadable: list[str] = []
    versions = 0
    for ref, blobs, problem in pool.map(lambda nv: _read_version(bucket, *nv), listed_versions(bucket)):
        if problem:
            (corrupt if problem.startswith("corrupt") else unreadable).append(problem.partition(": ")[2])
        if ref is None:
            continue
        versions += 1
        for sha, path, size in blobs:
            needed.setdefault(sha, []).append((f"{ref}:{path}", size))
    return versions, needed, corrupt, unreadable


def _hash_object(bucket: Bucket, key: str) -> str:
    digest = hashlib.sha256()
    with bucket.stream(key) as body:
        while chunk := body.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _wrong_size(sha: str, size: int, users: list[tuple[str, int]], corrupt: list[str]) -> bool:
    """Record (as the local store words it) every version whose size for ``sha`` is not the object's."""
    wrong = [f"{user} (manifest says {claimed} bytes)" for user, claimed in users if claimed != size]
    if wrong:
        corrupt.append(f"blob {sha}: {size} bytes, not the size recorded by {', '.join(wrong)}")
    return bool(wrong)


def verify_bucket(bucket: Bucket, policy: LeasePolicy) -> VerifyReport:
    """Read every manifest and hash every blob object; change nothing.

    Unreferenced blobs are ``orphaned`` only if no publish lease was live before and after the listing;
    otherwise they may be a publish in flight and are ``in_progress``.
    """
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="artifactkit-verify") as pool:
        busy = bool(live_publishers(bucket, policy.ttl_s, break_stale=False))
        versions, needed, corrupt, unreadable = mark(bucket, pool)
        present = {info.key.removeprefix("blobs/"): info for info in bucket.objects_under("blobs/")}
        busy = busy or bool(live_publishers(bucket, policy.ttl_s, break_stale=False))
        blobs = sorted(sha for sha in present if SHA_RE.fullmatch(sha))
        # The listing gave every object's length for free: a size no manifest could have is reported
        # with the versions that record it, and that blob is not hashed (it may be huge, and is wrong).
        sized = [sha for sha in blobs if not _wrong_size(sha, present[sha].size, needed.get(sha, []), corrupt)]
        for sha, actual in zip(sized, pool.map(lambda s: _hash_object(bucket, blob_key(s)), sized), strict=True):
            if actual != sha:
                users = ", ".join(user for user, _ in needed.get(sha, [("no version", 0)]))
                corrupt.append(f"blob {sha}: content hashes to {actual} (needed by {users})")
    missing = [f"blob {sha} (needed by {', '.join(user for user, _ in users)})" for sha, users in sorted(needed.items())
               if sha not in present]
    leftovers = [f"blobs/{name}" for name in sorted(present) if name not in needed]
    return VerifyReport(
        ok=not (corrupt or missing or unreadable), versions=versions, blobs_checked=len(blobs),
        corrupt=corrupt, missing=missing, unreadable=unreadable,
        orphaned=[] if busy else leftovers, in_progress=leftovers if busy else [])


def gc_bucket(bucket: Bucket, policy: LeasePolicy) -> GcReport:
    """Under ``locks/gc`` with no live publisher: delete unreferenced blobs older than ``grace_s``.

    An unreadable or corrupt manifest stops the sweep: nobody can say which blobs it needs.
    Multipart uploads abandoned longer than ``grace_s`` ago (a killed publisher's parts) are aborted
    and reported as ``removed_staging``.
    """
    with gc_lease(bucket, policy) as lease, ThreadPoolExecutor(WORKERS, thread_name_prefix="artifactkit-gc") as pool:
        _, needed, corrupt, unreadable = mark(bucket, pool)
        if corrupt or unreadable:
            raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                                 + "; ".join(corrupt + unreadable), path=bucket.url())
        cutoff = bucket.server_now() - timedelta(seconds=policy.grace_s)
        doomed: list[ObjectInfo] = [info for info in bucket.objects_under("blobs/")
                                    if info.key.removeprefix("blobs/") not in needed and info.last_modified < cutoff]
        removed, freed = [], 0
        for start in range(0, len(doomed), 100):
            lease.check()  # never delete after our lease may have lapsed
            batch = doomed[start:start + 100]
            list(pool.map(lambda info: bucket.delete(info.key), batch))
            removed += [info.key.removeprefix("blobs/") for info in batch]
            freed += sum(info.size for info in batch)
        lease.check()
        aborted = bucket.abort_uploads_before(cutoff)
    return GcReport(removed_blobs=removed, removed_staging=aborted, freed_bytes=freed)

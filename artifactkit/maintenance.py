"""Store maintenance: ``verify`` (read-only) and ``gc`` (under the store's exclusive lock)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from artifactkit.blobs import CHUNK
from artifactkit.errors import ArtifactkitError, IntegrityError
from artifactkit.linux import fsync_dir

if TYPE_CHECKING:
    from artifactkit.store import Store




@attrs.frozen
class VerifyReport:
    """What ``verify`` found. ``ok`` means every visible version is fully and correctly stored.

    ``orphaned`` (unreferenced blobs, abandoned staging) is only claimed when no publisher held the
    store meanwhile; otherwise such items may belong to a publish in flight and are ``in_progress``.
    """

    ok: bool
    versions: int
    blobs_checked: int
    corrupt: list[str]
    missing: list[str]
    unreadable: list[str]
    orphaned: list[str]
    in_progress: list[str]

    @property
    def clean(self) -> bool:
        """``ok`` and nothing left over for ``gc`` either."""
        return self.ok and not self.orphaned


@attrs.frozen
class GcReport:
    """What ``gc`` removed."""

    removed_blobs: list[str]
    removed_staging: list[str]
    freed_bytes: int


def _hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _referenced(store: Store, unreadable: list[str], corrupt: list[str]) -> dict[str, list[str]]:
    """blob digest -> the versions that need it, reading every manifest."""
    needed: dict[str, list[str]] = {}
    for ref in store.list():
        try:
            manifest = store.manifest(ref)
        except IntegrityError as err:
            # Bytes that exist but do not match their digest (or name) are corrupt; bytes that cannot
            # be parsed as a manifest are unreadable.
            (corrupt if getattr(err, "failed", None) == "corrupt" else unreadable).append(f"manifest {ref}: {err}")
            continue
        except (ArtifactkitError, OSError) as err:
            unreadable.append(f"manifest {ref}: {err}")
            continue
        for entry in manifest.files():
            assert entry.sha256 is not None
            needed.setdefault(entry.sha256, []).append(f"{ref}:{entry.path}")
    return needed


@contextlib.contextmanager
def _try_exclusive(store: Store) -> Iterator[bool]:
    """Hold the store lock exclusively if nobody else holds it; never create anything."""
    try:
        fd = os.open(os.path.join(store.locks, "store.lock"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True  # no lock file: no publisher has ever run
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def verify_store(store: Store) -> VerifyReport:
    """Check every manifest digest and every referenced blob's bytes; change nothing."""
    with _try_exclusive(store) as quiescent:
        unreadable: list[str] = []
        corrupt: list[str] = []
        needed = _referenced(store, unreadable, corrupt)
        missing: list[str] = []
        for sha, users in sorted(needed.items()):
            path = os.path.join(store.blobs, sha)
            try:
                actual = _hash_file(path)
            except FileNotFoundError:
                missing.append(f"blob {sha} (needed by {', '.join(users)})")
                continue
            if actual != sha:
                corrupt.append(f"blob {sha}: content hashes to {actual} (needed by {', '.join(users)})")
        leftovers = [f"blobs/{name}" for name in _listdir(store.blobs) if name not in needed]
        leftovers += [f"staging/{name}" for name in _listdir(store.staging)]
        return VerifyReport(
            ok=not (corrupt or missing or unreadable), versions=len(store.list()), blobs_checked=len(needed),
            corrupt=corrupt, missing=missing, unreadable=unreadable,
            orphaned=leftovers if quiescent else [], in_progress=[] if quiescent else leftovers)


def collect_garbage(store: Store) -> GcReport:
    """Remove staging leftovers and unreferenced blobs; the caller holds the exclusive lock.

    An unreadable manifest stops the blob sweep: nobody can say which blobs it needs.
    """
    removed_staging = []
    for name in _listdir(store.staging):
        shutil.rmtree(os.path.join(store.staging, name), ignore_errors=False)
        removed_staging.append(name)
    unreadable: list[str] = []
    needed = _referenced(store, unreadable, unreadable)
    if unreadable:
        raise IntegrityError("gc refuses to remove blobs while a manifest is unreadable: "
                             + "; ".join(unreadable), path=store.root)
    removed_blobs, freed = [], 0
    for name in _listdir(store.blobs):
        if name in needed:
            continue
        path = os.path.join(store.blobs, name)
        freed += os.lstat(path).st_size
        os.unlink(path)
        removed_blobs.append(name)
    if removed_blobs:
        fsync_dir(store.blobs)
    return GcReport(removed_blobs=removed_blobs, removed_staging=removed_staging, freed_bytes=freed)

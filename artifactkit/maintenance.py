"""Store maintenance: ``verify`` (read-only) and ``gc`` (under the store's exclusive lock)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from artifactkit.blobs import open_blob, sha256_of_fd
from artifactkit.errors import ArtifactkitError, IntegrityError
from artifactkit.linux import fsync_dir

if TYPE_CHECKING:
    from artifactkit.store import ArtifactRef, Store




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


def _hash_blob(path: str, sha: str) -> str:
    """The digest of a stored blob's bytes (a symlink, FIFO or directory there is an IntegrityError)."""
    fd = open_blob(path, sha, where="in the store")
    try:
        return sha256_of_fd(fd)[0]
    finally:
        os.close(fd)


def _referenced(store: Store, unreadable: list[str], corrupt: list[str],
                refs: list[ArtifactRef] | None = None) -> dict[str, list[str]]:
    """blob digest -> the versions that need it, reading every manifest."""
    needed: dict[str, list[str]] = {}
    for ref in store.list() if refs is None else refs:
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
    """Check every manifest digest and every referenced blob's bytes; change nothing.

    The store lock is held (exclusively, and only if free) just long enough to read the manifests
    and list the store, so leftovers can be called orphaned with confidence; hashing the blobs then
    runs without it, so a long verify never stops publishers.
    """
    unreadable: list[str] = []
    corrupt: list[str] = []
    with _try_exclusive(store) as quiescent:
        refs = store.list()
        needed = _referenced(store, unreadable, corrupt, refs)
        leftovers = [f"blobs/{name}" for name in _listdir(store.blobs) if name not in needed]
        leftovers += [f"staging/{name}" for name in _listdir(store.staging)]
    missing: list[str] = []
    for sha, users in sorted(needed.items()):
        try:
            actual = _hash_blob(os.path.join(store.blobs, sha), sha)
        except IntegrityError as err:
            if getattr(err, "failed", None) != "missing":
                corrupt.append(f"blob {sha}: {err} (needed by {', '.join(users)})")
                continue
            missing.append(f"blob {sha} (needed by {', '.join(users)})")
            continue
        if actual != sha:
            corrupt.append(f"blob {sha}: content hashes to {actual} (needed by {', '.join(users)})")
    return VerifyReport(
        ok=not (corrupt or missing or unreadable), versions=len(refs), blobs_checked=len(needed),
        corrupt=corrupt, missing=missing, unreadable=unreadable,
        orphaned=leftovers if quiescent else [], in_progress=[] if quiescent else leftovers)


def collect_garbage(store: Store) -> GcReport:
    """Remove staging leftovers and unreferenced blobs; the caller holds the exclusive lock.

    An unreadable manifest stops the blob sweep: nobody can say which blobs it needs.
    """
    removed_staging = []
    for name in _listdir(store.staging):
        path = os.path.join(store.staging, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)  # a stray file or link in staging/ is a leftover too
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
        st = os.lstat(path)
        freed += st.st_size
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # not a blob at all: blobs are files
        else:
            os.unlink(path)
        removed_blobs.append(name)
    if removed_blobs:
        fsync_dir(store.blobs)
    return GcReport(removed_blobs=removed_blobs, removed_staging=removed_staging, freed_bytes=freed)

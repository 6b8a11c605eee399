"""``verify``: check every manifest digest and every referenced blob's bytes, changing nothing."""

from __future__ import annotations

import os

import attrs

from artifactkit.errors import ArtifactkitError, IntegrityError, IntegrityFailure
from artifactkit.store.content import open_blob, sha256_of_fd
from artifactkit.store.layout import ArtifactRef, StoreLayout
from artifactkit.store.locks import store_lock_if_free
from artifactkit.store.manifest_file import read_manifest


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


def _hash_blob(path: str, sha: str) -> str:
    """The digest of a stored blob's bytes (a symlink, FIFO or directory there is an IntegrityError)."""
    fd = open_blob(path, sha, where="in the store")
    try:
        return sha256_of_fd(fd)[0]
    finally:
        os.close(fd)


def referenced_blobs(layout: StoreLayout, unreadable: list[str], corrupt: list[str],
                refs: list[ArtifactRef] | None = None) -> dict[str, list[str]]:
    """blob digest -> the versions that need it, reading every manifest."""
    needed: dict[str, list[str]] = {}
    for ref in layout.refs() if refs is None else refs:
        try:
            manifest = read_manifest(layout, ref)
        except IntegrityError as err:
            # Bytes that exist but do not match their digest (or name) are corrupt; bytes that cannot
            # be parsed as a manifest are unreadable.
            found = corrupt if getattr(err, "failed", None) == IntegrityFailure.CORRUPT else unreadable
            found.append(f"manifest {ref}: {err}")
            continue
        except (ArtifactkitError, OSError) as err:
            unreadable.append(f"manifest {ref}: {err}")
            continue
        for entry in manifest.files():
            assert entry.sha256 is not None
            needed.setdefault(entry.sha256, []).append(f"{ref}:{entry.path}")
    return needed


def listdir_sorted(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def verify_store(layout: StoreLayout) -> VerifyReport:
    """Check every manifest digest and every referenced blob's bytes; change nothing.

    The store lock is held (exclusively, and only if free) just long enough to read the manifests
    and list the store, so leftovers can be called orphaned with confidence; hashing the blobs then
    runs without it, so a long verify never stops publishers.
    """
    unreadable: list[str] = []
    corrupt: list[str] = []
    with store_lock_if_free(layout.locks_dir) as quiescent:
        refs = layout.refs()
        needed = referenced_blobs(layout, unreadable, corrupt, refs)
        leftovers = [f"blobs/{name}" for name in listdir_sorted(layout.blobs_dir) if name not in needed]
        leftovers += [f"staging/{name}" for name in listdir_sorted(layout.staging_dir)]
    missing: list[str] = []
    for sha, users in sorted(needed.items()):
        try:
            actual = _hash_blob(os.path.join(layout.blobs_dir, sha), sha)
        except IntegrityError as err:
            if getattr(err, "failed", None) != IntegrityFailure.MISSING:
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

"""``verify``: check every manifest digest and every referenced blob's bytes, changing nothing."""

from __future__ import annotations

import os

import attrs

from artifactkit.errors import ArtifactkitError, IntegrityError, IntegrityFailure
from artifactkit.store.content import open_blob, sha256_of_fd
from artifactkit.store.layout import ArtifactRef
from artifactkit.store.locks import store_lock_if_free
from artifactkit.store.manifest_file import read_manifest
from artifactkit.store.store_dirs import StoreDirs, listdir_fd


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


def _check_blob(dirs: StoreDirs, sha: str, users: list[tuple[str, int]], corrupt: list[str]) -> None:
    """Hash one stored blob (a symlink, FIFO or directory there is an IntegrityError) once its size is the one
    every manifest that needs it records: a forged size is reported with its version, not hashed for."""
    fd = open_blob(sha, sha, where="in the store", dir_fd=dirs.blobs)
    try:
        size = os.fstat(fd).st_size
        wrong = [f"{user} (manifest says {claimed} bytes)" for user, claimed in users if claimed != size]
        if wrong:
            corrupt.append(f"blob {sha}: {size} bytes, not the size recorded by {', '.join(wrong)}")
            return
        actual = sha256_of_fd(fd)[0]
    finally:
        os.close(fd)
    if actual != sha:
        corrupt.append(f"blob {sha}: content hashes to {actual} (needed by {', '.join(u for u, _ in users)})")


def referenced_blobs(dirs: StoreDirs, unreadable: list[str], corrupt: list[str],
                     refs: list[ArtifactRef] | None = None) -> dict[str, list[tuple[str, int]]]:
    """blob digest -> ``(version:path, size recorded)`` of every entry that needs it, reading every manifest."""
    needed: dict[str, list[tuple[str, int]]] = {}
    for ref in dirs.refs() if refs is None else refs:
        try:
            manifest = read_manifest(dirs, ref)
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
            needed.setdefault(entry.sha256, []).append((f"{ref}:{entry.path}", entry.size))
    return needed


def verify_store(dirs: StoreDirs) -> VerifyReport:
    """Check every manifest digest, every referenced blob's size and bytes; change nothing.

    The store lock is held (exclusively, and only if free) just long enough to read the manifests
    and list the store, so leftovers can be called orphaned with confidence; hashing the blobs then
    runs without it, so a long verify never stops publishers.
    """
    unreadable: list[str] = []
    corrupt: list[str] = []
    with store_lock_if_free(dirs.locks) as quiescent:
        refs = dirs.refs()
        needed = referenced_blobs(dirs, unreadable, corrupt, refs)
        leftovers = [f"blobs/{name}" for name in listdir_fd(dirs.blobs) if name not in needed]
        leftovers += [f"staging/{name}" for name in listdir_fd(dirs.staging)]
    missing: list[str] = []
    for sha, users in sorted(needed.items()):
        try:
            _check_blob(dirs, sha, users, corrupt)
        except IntegrityError as err:
            names = ", ".join(user for user, _ in users)
            if getattr(err, "failed", None) != IntegrityFailure.MISSING:
                corrupt.append(f"blob {sha}: {err} (needed by {names})")
            else:
                missing.append(f"blob {sha} (needed by {names})")
    return VerifyReport(
        ok=not (corrupt or missing or unreadable), versions=len(refs), blobs_checked=len(needed),
        corrupt=corrupt, missing=missing, unreadable=unreadable,
        orphaned=leftovers if quiescent else [], in_progress=[] if quiescent else leftovers)

"""``verify``, written once for every backend: read every manifest (the *mark*), check every referenced blob's
size and bytes, and report leftovers; change nothing."""

from __future__ import annotations

import attrs

from artifactkit.errors import ArtifactkitError, IntegrityError, IntegrityFailure
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import Manifest
from artifactkit.store.backend import Opened
from artifactkit.store.progress import Reporter
from artifactkit.store.versions import each, read_manifest

#: blob digest -> ``(name@version:path, size recorded)`` of every entry that needs it.
Needed = dict[str, list[tuple[str, int]]]


@attrs.frozen
class VerifyReport:
    """What ``verify`` found. ``ok`` means every visible version is fully and correctly stored.

    ``orphaned`` (unreferenced blobs, abandoned staging) is only claimed when no publisher held the
    store meanwhile; otherwise such items may belong to a publish in flight and are ``in_progress``.
    Leftovers younger than the grace ``gc`` gives by default (``grace_s``: a bucket's hour) are ``kept``, as
    ``gc`` reports them: not orphaned, since ``gc`` would not remove them yet.
    ``broken_versions``: every version (``name@version``) that cannot be downloaded exactly, because its
    manifest or a blob it names is corrupt, missing or unreadable; a publish of the same content repairs a
    damaged blob (:mod:`~artifactkit.engine.blob_check`).
    """

    ok: bool
    versions: int
    blobs_checked: int
    corrupt: list[str]
    missing: list[str]
    unreadable: list[str]
    orphaned: list[str]
    in_progress: list[str]
    kept: list[str] = attrs.field(factory=list)
    grace_s: float = 0.0
    broken_versions: list[str] = attrs.field(factory=list)

    @property
    def clean(self) -> bool:
        """``ok`` and nothing left over for ``gc`` either."""
        return self.ok and not self.orphaned


def read_version(opened: Opened, name: str, version: int) -> tuple[Manifest, dict[str, int]] | None:
    """The verified manifest of ``name@version`` and its tree objects' sizes (``None``: it vanished since the
    listing)."""
    ref = opened.ref(name, version)
    return None if ref is None else read_manifest(opened, ref)


def mark(opened: Opened, progress: Reporter | None = None, *,
         broken: set[tuple[str, int]] | None = None) -> tuple[int, Needed, list[str], list[str]]:
    """Read every manifest: ``(versions read, blob -> its users with the size each records, corrupt,
    unreadable)``. Bytes that do not match their digest are corrupt; bytes that cannot be read or parsed as a
    manifest are unreadable; ``broken`` gets the ``(name, version)`` of each."""
    needed: Needed = {}
    corrupt: list[str] = []
    unreadable: list[str] = []
    versions = 0

    def read(pair: tuple[str, int]) -> tuple[tuple[str, int], tuple[Manifest, dict[str, int]] | None, str]:
        try:
            return pair, read_version(opened, *pair), ""
        except IntegrityError as err:
            kind = "corrupt" if getattr(err, "failed", None) == IntegrityFailure.CORRUPT else "unreadable"
            return pair, None, f"{kind}:{err}"
        except (ArtifactkitError, OSError) as err:
            return pair, None, f"unreadable:{err}"
    listed = opened.versions()
    progress = progress or Reporter(None)
    progress.phase("manifests", entries_total=len(listed))
    for (name, version), read_back, problem in each(opened, read, listed):
        progress.advance(1)
        if problem:
            kind, _, why = problem.partition(":")
            (corrupt if kind == "corrupt" else unreadable).append(f"manifest {ArtifactRef(name, version, '')}: {why}")
            if broken is not None:
                broken.add((name, version))
        if read_back is None:
            continue
        manifest, objects = read_back
        versions += 1
        for digest, size in objects.items():
            needed.setdefault(digest, []).append((f"{name}@{version}:(tree object)", size))
        for entry in manifest.files():
            assert entry.sha256 is not None
            needed.setdefault(entry.sha256, []).append((f"{name}@{version}:{entry.path}", entry.size))
    return versions, needed, corrupt, unreadable


def verify_store(opened: Opened, progress: Reporter | None = None) -> VerifyReport:
    """Check every manifest digest, every referenced blob's size and bytes; change nothing.

    The backend's quiescence check spans the mark and the listing (a local store's lock, taken only if
    free; a bucket's publish leases, looked at before and after), so leftovers can be called orphaned with
    confidence; hashing the blobs then runs without it, so a long verify never stops publishers.
    """
    with opened.quiescent() as quiet:
        progress = progress or Reporter(None)
        broken: set[tuple[str, int]] = set()
        versions, needed, corrupt, unreadable = mark(opened, progress, broken=broken)
        present = opened.blob_names()
        # What gc would keep for the grace is kept here too; the sizes are not walked: verify frees nothing.
        leftovers = [(f"blobs/{item.name}", item) for item in opened.blob_garbage(needed, measure=False)]
        leftovers += [(f"{opened.staging_dir}/{item.name}", item) for item in opened.staging_garbage(measure=False)]
        quiescent = quiet()
    missing: list[str] = []

    def check(item: tuple[str, list[tuple[str, int]]]) -> tuple[str, str, list[tuple[str, int]]]:
        """What is wrong with a blob ("" if nothing), the problem, and the users it breaks."""
        sha, users = item
        names = ", ".join(user for user, _ in users)
        breaks = f"breaks {', '.join(str(ref) for ref in _versions_of(users))}"
        if sha not in present:
            return "missing", f"blob {sha}; {breaks} (needed by {names})", users
        try:
            size, actual = opened.blob_digest(sha, {claimed for _, claimed in users}, present[sha])
        except IntegrityError as err:
            if getattr(err, "failed", None) == IntegrityFailure.MISSING:
                return "missing", f"blob {sha}; {breaks} (needed by {names})", users
            return "corrupt", f"blob {sha}: {err}; {breaks} (needed by {names})", users
        # A size no manifest could have is reported with the versions that record it, and never hashed for; only
        # those versions are broken by it.
        wrong = [(user, claimed) for user, claimed in users if claimed != size]
        if wrong:
            recorded = ", ".join(f"{user} (manifest says {claimed} bytes)" for user, claimed in wrong)
            return "corrupt", (f"blob {sha}: {size} bytes, not the size recorded by {recorded}; breaks "
                               f"{', '.join(str(ref) for ref in _versions_of(wrong))}"), wrong
        if actual != sha:
            return "corrupt", f"blob {sha}: content hashes to {actual}; {breaks} (needed by {names})", users
        return "", "", []
    progress.phase("blobs", entries_total=len(needed), bytes_total=sum(users[0][1] for users in needed.values()))
    for (_, users), (kind, problem, broke) in zip(sorted(needed.items()), each(opened, check, sorted(needed.items())),
                                                  strict=True):
        (missing if kind == "missing" else corrupt if kind else []).append(problem)
        broken.update((ref.name, ref.version) for ref in _versions_of(broke))
        progress.advance(1, users[0][1])
    grace = opened.default_grace_s
    kept = [name for name, item in leftovers if item.young(grace)] if quiescent else []
    return VerifyReport(
        ok=not (corrupt or missing or unreadable), versions=versions, blobs_checked=len(needed),
        corrupt=corrupt, missing=missing, unreadable=unreadable,
        orphaned=[name for name, item in leftovers if not item.young(grace)] if quiescent else [],
        in_progress=[] if quiescent else [name for name, _ in leftovers], kept=kept, grace_s=grace,
        broken_versions=[f"{name}@{version}" for name, version in sorted(broken)])


def _versions_of(users: list[tuple[str, int]]) -> list[ArtifactRef]:
    """The versions among a blob's users (``name@version:path``), each once, in order."""
    found = {user.partition(":")[0].rpartition("@")[::2] for user, _ in users}
    return sorted(ArtifactRef(name, int(version), "") for name, version in found)

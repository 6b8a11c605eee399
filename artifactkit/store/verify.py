"""``verify``, written once for every backend: read every manifest (the *mark*), check every referenced blob's
size and bytes, and report leftovers; change nothing.

Memory does not grow with the store (issue 52): a version is read a tree object at a time
(:mod:`~artifactkit.manifest.tree_stream`), what the versions need goes to a sort on a temporary file
(:mod:`~artifactkit.store.needed_blobs`: 42 bytes of disk per entry of each version, none of memory), and each blob
is checked once, in digest order, read back from it. What is held: the objects being fetched (one at a time on a local
disk; a bucket reads 8 versions at once, 8 objects each), each at most the manifest limit (a writer's are at most 1
MiB); the sort's run being filled (4 MiB of records) and its merge's reads (at most 32 of 64 KiB); and what is found
wrong or left over. Measured: 35 MiB peak RSS at 200,000 files, as at 20,000 (28 MiB).
"""

from __future__ import annotations

import contextlib

import attrs

from artifactkit.errors import ArtifactkitError, IntegrityError, IntegrityFailure
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.backend import Opened
from artifactkit.store.needed_blobs import NeededBlobs
from artifactkit.store.progress import Reporter
from artifactkit.store.version_needs import TREE_OBJECT, version_needs
from artifactkit.store.versions import each


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


def mark(opened: Opened, progress: Reporter | None = None, *, broken: set[tuple[str, int]] | None = None,
         listed: list[tuple[str, int]] | None = None) -> tuple[int, NeededBlobs, list[str], list[str]]:
    """Read every version (:func:`~artifactkit.store.version_needs.version_needs`): ``(versions read, the blobs and
    objects they need, each with the sizes recorded for it, corrupt, unreadable)``; the caller closes what is
    needed. Bytes that do not match their digest are corrupt; bytes that cannot be read or parsed as a manifest are
    unreadable; ``broken`` gets the ``(name, version)`` of each. ``listed``: the versions, listed already."""
    needed = NeededBlobs()
    corrupt: list[str] = []
    unreadable: list[str] = []
    versions = 0

    def read(pair: tuple[str, int]) -> tuple[tuple[str, int], bool, str]:
        try:
            ref = opened.ref(*pair)
            if ref is None:
                return pair, False, ""  # it vanished since the listing
            for _, digest, size in version_needs(opened, ref):
                needed.add(digest, size)
        except IntegrityError as err:
            kind = "corrupt" if getattr(err, "failed", None) == IntegrityFailure.CORRUPT else "unreadable"
            return pair, False, f"{kind}:{err}"
        except (ArtifactkitError, OSError) as err:
            return pair, False, f"unreadable:{err}"
        return pair, True, ""
    listed = opened.versions() if listed is None else listed
    progress = progress or Reporter(None)
    progress.phase("manifests", entries_total=len(listed))
    try:
        for (name, version), read_back, problem in each(opened, read, listed):
            progress.advance(1)
            if problem:
                kind, _, why = problem.partition(":")
                (corrupt if kind == "corrupt" else unreadable).append(
                    f"manifest {ArtifactRef(name, version, '')}: {why}")
                if broken is not None:
                    broken.add((name, version))
            versions += read_back
        needed.finish()
    except BaseException:
        needed.close()
        raise
    return versions, needed, corrupt, unreadable


def users_of(opened: Opened, listed: list[tuple[str, int]], digests: set[str]) -> dict[str, list[tuple[str, int]]]:
    """The users of each of ``digests`` (``name@version:path`` or ``name@version:(tree object)``, with the size each
    records), the versions in order, each version's tree objects before its files, the files in path order: a
    second walk of every version, made only for the few blobs found wrong."""
    def read(pair: tuple[str, int]) -> list[tuple[str, str, int]]:
        found: list[tuple[str, str, int]] = []
        with contextlib.suppress(ArtifactkitError, OSError):  # reported by the mark already (or gone since)
            ref = opened.ref(*pair)
            for path, digest, size in version_needs(opened, ref) if ref is not None else ():
                if digest in digests:
                    found.append((path, digest, size))
        return found
    users: dict[str, list[tuple[str, int]]] = {digest: [] for digest in digests}
    for (name, version), found in zip(listed, each(opened, read, listed), strict=True):
        for path, digest, size in sorted(found, key=lambda use: (use[0] != TREE_OBJECT, use[0])):
            users[digest].append((f"{name}@{version}:{path}", size))
    return users


#: What is wrong with a blob: ``missing``, ``error`` (unreadable as a blob), ``size`` (another size than some
#: version records) or ``hash`` (other bytes); its size and digest as read; the error met.
Outcome = tuple[str, int, str | None, IntegrityError | None]


def verify_store(opened: Opened, progress: Reporter | None = None) -> VerifyReport:
    """Check every manifest digest, every referenced blob's size and bytes; change nothing.

    The backend's quiescence check spans the mark and the listing (a local store's lock, taken only if
    free; a bucket's publish leases, looked at before and after), so leftovers can be called orphaned with
    confidence; hashing the blobs then runs without it, so a long verify never stops publishers.

    Memory: one version's walk at a time per thread (:mod:`~artifactkit.manifest.tree_stream`), the runs of the
    sort of what they need (:mod:`~artifactkit.store.needed_blobs`), and the problems found; never a version's
    listing or a blob's users (those of a blob found wrong are read again, :func:`users_of`).
    """
    with opened.quiescent() as quiet:
        progress = progress or Reporter(None)
        broken: set[tuple[str, int]] = set()
        listed = opened.versions()
        versions, needed, corrupt, unreadable = mark(opened, progress, broken=broken, listed=listed)
        try:
            # What gc would keep for the grace is kept here too; the sizes are not walked: verify frees nothing.
            leftovers = [(f"blobs/{item.name}", item) for item in opened.blob_garbage(needed, measure=False)]
            leftovers += [(f"{opened.staging_dir}/{item.name}", item) for item in opened.staging_garbage(measure=False)]
            quiescent = quiet()
        except BaseException:
            needed.close()
            raise
    missing: list[str] = []

    def check(item: tuple[str, tuple[int, ...]]) -> tuple[str, int, Outcome | None]:
        sha, sizes = item
        try:
            size, actual = opened.blob_digest(sha, set(sizes))
        except IntegrityError as err:
            failed = getattr(err, "failed", None) == IntegrityFailure.MISSING
            return sha, sizes[0], ("missing" if failed else "error", 0, None, err)
        # A size no manifest could have is reported with the versions that record it, and never hashed for.
        if any(claimed != size for claimed in sizes):
            return sha, sizes[0], ("size", size, actual, None)
        return sha, sizes[0], None if actual == sha else ("hash", size, actual, None)
    progress.phase("blobs", entries_total=len(needed), bytes_total=needed.bytes)
    wrong: list[tuple[str, Outcome]] = []
    with contextlib.closing(needed):
        for sha, recorded, outcome in each(opened, check, needed.items()):
            if outcome is not None:
                wrong.append((sha, outcome))
            progress.advance(1, recorded)
    users = users_of(opened, listed, {sha for sha, _ in wrong}) if wrong else {}
    for sha, outcome in wrong:
        kind, problem, broke = _problem(sha, outcome, users[sha])
        (missing if kind == "missing" else corrupt if kind else []).append(problem)
        broken.update((ref.name, ref.version) for ref in _versions_of(broke))
    grace = opened.default_grace_s
    kept = [name for name, item in leftovers if item.young(grace)] if quiescent else []
    return VerifyReport(
        ok=not (corrupt or missing or unreadable), versions=versions, blobs_checked=len(needed),
        corrupt=corrupt, missing=missing, unreadable=unreadable,
        orphaned=[name for name, item in leftovers if not item.young(grace)] if quiescent else [],
        in_progress=[] if quiescent else [name for name, _ in leftovers], kept=kept, grace_s=grace,
        broken_versions=[f"{name}@{version}" for name, version in sorted(broken)])


def _problem(sha: str, outcome: Outcome, users: list[tuple[str, int]]) -> tuple[str, str, list[tuple[str, int]]]:
    """What is wrong with the blob ``sha`` ("" if nothing after all), the problem as the report says it, and the
    users it breaks."""
    kind, size, actual, err = outcome
    names = ", ".join(user for user, _ in users)
    breaks = f"breaks {', '.join(str(ref) for ref in _versions_of(users))}"
    if kind == "missing":
        return "missing", f"blob {sha}; {breaks} (needed by {names})", users
    if kind == "error":
        return "corrupt", f"blob {sha}: {err}; {breaks} (needed by {names})", users
    # Only the versions that record another size are broken by a wrong size.
    wrong = [(user, claimed) for user, claimed in users if claimed != size]
    if wrong:
        recorded = ", ".join(f"{user} (manifest says {claimed} bytes)" for user, claimed in wrong)
        return "corrupt", (f"blob {sha}: {size} bytes, not the size recorded by {recorded}; breaks "
                           f"{', '.join(str(ref) for ref in _versions_of(wrong))}"), wrong
    if actual != sha:
        return "corrupt", f"blob {sha}: content hashes to {actual}; {breaks} (needed by {names})", users
    return "", "", []


def _versions_of(users: list[tuple[str, int]]) -> list[ArtifactRef]:
    """The versions among a blob's users (``name@version:path``), each once, in order."""
    found = {user.partition(":")[0].rpartition("@")[::2] for user, _ in users}
    return sorted(ArtifactRef(name, int(version), "") for name, version in found)

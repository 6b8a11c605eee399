"""A transparent content-addressed store: ``blobs/<sha256>`` files and JSON manifests.

Layout (a person can inspect it and ``sha256sum`` the blobs)::

    ROOT/blobs/<sha256>                       immutable, uncompressed content
    ROOT/manifests/<name>/<version>.<sha256>.json   one per version; the digest in the name pins it
    ROOT/staging/<txn>/                       a publish in progress (or a crashed one, for gc)
    ROOT/locks/                               flock files: store.lock (gc vs publish), <name>.lock

Publish durability: all of a publish's new blobs and its manifest are written into staging,
then *one* ``syncfs`` barrier flushes them all, then blobs are renamed into place and
``blobs/`` is fsynced, then the manifest is renamed under the name's lock and its directory is
fsynced. A visible name therefore always refers to flushed bytes (git's ``fsyncMethod=batch``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat

import attrs

from artifactkit.blobs import read_source, write_staged
from artifactkit.errors import IntegrityError
from artifactkit.linux import fsync_dir, rename_noreplace, syncfs
from artifactkit.locks import flocked, store_lock
from artifactkit.maintenance import GcReport, VerifyReport, collect_garbage, verify_store
from artifactkit.manifest import Manifest, check_representable, digest_of, parse_manifest
from artifactkit.meta import FileMeta
from artifactkit.paths import check_artifact_name
from artifactkit.restore import restore_tree
from artifactkit.scan import ScannedTree, scan_tree


@attrs.frozen(order=True)
class ArtifactRef:
    """One published version: name, version (from 1) and the sha256 of its manifest bytes."""

    name: str
    version: int
    digest: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


# "<version>.<sha256>.json": ASCII digits without a leading zero, so "01." and "1." or "²" never
# name a version, and a stray file in a name's directory is simply not one.
_VERSION_FILE = re.compile(r"([1-9][0-9]*)\.([0-9a-f]{64})\.json", re.ASCII)


def _commit_name(staged: str, final: str) -> None:
    """Make ``final`` appear atomically, never replacing anything (the name lock is held too)."""
    try:
        rename_noreplace(staged, final)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        # NFS and some FUSE filesystems lack RENAME_NOREPLACE; link(2) fails on an existing name
        # just as atomically, and the staged name is then dropped.
        os.link(staged, final)
        os.unlink(staged)


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def with_sha256(entry: FileMeta, sha: str) -> FileMeta:
    """``entry`` with its digest filled in (direct construction: ``attrs.evolve`` costs 6 us a file)."""
    return FileMeta(path=entry.path, kind=entry.kind, mode=entry.mode, mtime_ns=entry.mtime_ns,
                    atime_ns=entry.atime_ns, size=entry.size, sha256=sha, target=entry.target,
                    ctime_ns=entry.ctime_ns)


class Store:
    """Publish trees into, and download them out of, a store rooted at ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.blobs = os.path.join(self.root, "blobs")
        self.manifests = os.path.join(self.root, "manifests")
        self.staging = os.path.join(self.root, "staging")
        self.locks = os.path.join(self.root, "locks")
        self._layout_durable = False

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- publish ---------------------------------------------------------------------------

    def _ensure_layout(self) -> None:
        """Create missing layout dirs and make each new one durable in its parent.

        A visible manifest is only as durable as every directory above it: without these fsyncs a
        power cut after the first publish returned could lose ``blobs/`` or the whole store.
        """
        if self._layout_durable:
            return
        for path in (self.root, self.blobs, self.manifests, self.staging, self.locks):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o755)
        # Once per Store, whoever created them: a publisher killed between its mkdir and its fsync
        # would otherwise leave layout dirs that no later publisher ever makes durable.
        fsync_dir(self.root)
        fsync_dir(os.path.dirname(self.root) or "/")
        self._layout_durable = True

    def publish(self, src: str | os.PathLike[str], name: str) -> ArtifactRef:
        """Publish the tree at ``src`` as the next version of ``name``; visible only once complete."""
        check_artifact_name(name)
        tree = scan_tree(src)  # every lstat before any read
        check_representable(tree.entries, where=f"publish of {os.fspath(src)!r}")
        self._ensure_layout()
        with store_lock(self.locks, exclusive=False):
            txn = os.path.join(self.staging, f"publish-{os.getpid()}-{secrets.token_hex(8)}")
            os.mkdir(txn, 0o700)
            try:
                return self._publish_staged(tree, name, txn)
            finally:
                shutil.rmtree(txn, ignore_errors=True)

    def _publish_staged(self, tree: ScannedTree, name: str, txn: str) -> ArtifactRef:
        staged: dict[str, str] = {}  # digest -> staging file name
        entries = []
        all_noatime = tree.listed_noatime
        txn_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        blobs_fd = os.open(self.blobs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for entry in tree.entries:
                if entry.kind != "file":
                    entries.append(entry)
                    continue
                stage_name = f"blob-{len(entries)}"
                sha, noatime, data = read_source(
                    f"{tree.root}/{entry.path}", entry, tree.identities[entry.path],
                    stage_fd=txn_fd, stage_name=stage_name)
                all_noatime = all_noatime and noatime
                is_new = sha not in staged and not _exists_at(blobs_fd, sha)
                if data is None and not is_new:
                    os.unlink(stage_name, dir_fd=txn_fd)  # copied while hashing, but already stored
                elif is_new:
                    if data is not None:
                        write_staged(txn_fd, stage_name, data)
                    staged[sha] = stage_name
                entries.append(with_sha256(entry, sha))
            manifest = Manifest(name=name, entries=tuple(entries), source_read_noatime=all_noatime)
            body = manifest.to_bytes()
            digest = digest_of(body)
            write_staged(txn_fd, "manifest.json", body)
            syncfs(txn_fd)  # the one barrier: every staged blob and the manifest are on disk
            for sha, stage_name in staged.items():
                # Plain rename: if a concurrent publisher committed the same content first, this
                # atomically swaps in identical, already flushed bytes (and costs no ctypes call).
                os.rename(stage_name, sha, src_dir_fd=txn_fd, dst_dir_fd=blobs_fd)
            fsync_dir(self.blobs)  # also covers blobs we deduplicated against a concurrent publisher
            return self._commit_manifest(name, os.path.join(txn, "manifest.json"), digest)
        finally:
            os.close(blobs_fd)
            os.close(txn_fd)

    def _commit_manifest(self, name: str, staged_manifest: str, digest: str) -> ArtifactRef:
        name_dir = os.path.join(self.manifests, name)
        # Name locks live apart from store.lock and turnstile.lock: an artifact named "store" must not
        # lock the store lock it already holds shared (a self-deadlock), nor one named "turnstile" gc's.
        names = os.path.join(self.locks, "names")
        with contextlib.suppress(FileExistsError):
            os.mkdir(names, 0o755)
        with flocked(os.path.join(names, f"{name}.lock"), exclusive=True):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name_dir, 0o755)
            version = max((v for v, _ in self._versions(name)), default=0) + 1
            _commit_name(staged_manifest, os.path.join(name_dir, f"{version}.{digest}.json"))
            fsync_dir(name_dir)
            if version == 1:
                # Also when the dir already existed: a publisher killed between its mkdir and this
                # fsync left a name dir that a power cut could still take with our version in it.
                fsync_dir(self.manifests)
        return ArtifactRef(name=name, version=version, digest=digest)

    # -- reading ---------------------------------------------------------------------------

    def _blob(self, sha: str) -> str:
        return os.path.join(self.blobs, sha)

    def _versions(self, name: str) -> list[tuple[int, str]]:
        """(version, digest) pairs of ``name``, from file names alone (no manifest is read)."""
        try:
            names = os.listdir(os.path.join(self.manifests, name))
        except (FileNotFoundError, NotADirectoryError):
            return []  # no such name, or a stray file in manifests/: not a version either way
        found = []
        for filename in names:
            match = _VERSION_FILE.fullmatch(filename)
            if match:
                found.append((int(match[1]), match[2]))
        return sorted(found)

    def list(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version."""
        try:
            names = os.listdir(self.manifests)
        except FileNotFoundError:
            return []
        return sorted(ArtifactRef(name, version, digest)
                      for name in names for version, digest in self._versions(name))

    def resolve(self, name_or_ref: str | ArtifactRef, version: int | None = None) -> ArtifactRef:
        """Find a version: an :class:`ArtifactRef`, ``name`` (latest), ``name@V``, or ``name`` + ``version``."""
        if isinstance(name_or_ref, ArtifactRef):
            return name_or_ref
        name = name_or_ref
        if version is None and "@" in name:
            name, _, text = name.rpartition("@")
            if not text.isdigit():
                raise ValueError(f"version in {name_or_ref!r} must be a positive integer")
            version = int(text)
        check_artifact_name(name)
        versions = self._versions(name)
        if not versions:
            raise LookupError(f"no artifact named {name!r} in {self.root}")
        if version is None:
            found_version, digest = versions[-1]
            return ArtifactRef(name, found_version, digest)
        for found_version, digest in versions:
            if found_version == version:
                return ArtifactRef(name, version, digest)
        raise LookupError(f"{name!r} has no version {version} (latest is {versions[-1][0]})")

    def manifest(self, ref: str | ArtifactRef, version: int | None = None) -> Manifest:
        """The verified manifest of a version: its bytes must hash to the digest that names it."""
        ref = self.resolve(ref, version)
        path = os.path.join(self.manifests, ref.name, f"{ref.version}.{ref.digest}.json")
        try:
            # O_NONBLOCK: a FIFO planted as a manifest is refused below rather than hanging the open.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise IntegrityError(f"manifest of {ref} is a symlink; manifests are plain files", path=path,
                                 failed="corrupt") from err
        with open(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise IntegrityError(f"manifest of {ref} is not a regular file", path=path, failed="corrupt")
            body = handle.read()
        if digest_of(body) != ref.digest:
            raise IntegrityError(
                f"manifest of {ref} is corrupt: its bytes hash to {digest_of(body)}, not {ref.digest}",
                path=path, expected=ref.digest, actual=digest_of(body), failed="corrupt")
        manifest = parse_manifest(body, where=f"manifest of {ref}")
        if manifest.name != ref.name:
            # A manifest copied (and renamed by its digest) from another artifact is not this one.
            raise IntegrityError(f"manifest of {ref} names another artifact, {manifest.name!r}",
                                 path=path, expected=ref.name, actual=manifest.name, failed="corrupt")
        return manifest

    def download(self, name_or_ref: str | ArtifactRef, dest: str | os.PathLike[str],
                 version: int | None = None) -> ArtifactRef:
        """Materialize a version at ``dest`` (which must not exist) with exact metadata, or nothing."""
        ref = self.resolve(name_or_ref, version)
        target = os.path.abspath(os.fspath(dest))
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "download destination already exists", target)
        restore_tree(self.manifest(ref).entries, target, blob_path=self._blob, shape_checked=True)
        return ref

    # -- maintenance -----------------------------------------------------------------------

    def verify(self) -> VerifyReport:
        """Check every manifest and blob without changing anything."""
        return verify_store(self)

    def gc(self) -> GcReport:
        """Remove unreferenced blobs and abandoned staging, excluding every publisher meanwhile."""
        if not os.path.isdir(self.manifests):
            # Never create a store here: a mistyped path should not grow an empty one.
            raise FileNotFoundError(errno.ENOENT, "no artifactkit store here (no manifests/ directory)", self.root)
        self._ensure_layout()
        with store_lock(self.locks, exclusive=True):
            return collect_garbage(self)

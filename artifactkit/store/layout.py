"""The bottom of the store: its directory layout, version names and :class:`ArtifactRef`.

Layout (a person can inspect it and ``sha256sum`` the blobs)::

    ROOT/blobs/<sha256>                              immutable, uncompressed content
    ROOT/manifests/<name>/<version>.<sha256>.json    one per version; the digest in the name pins it
    ROOT/staging/<txn>/                              a publish in progress (or a crashed one, for gc)
    ROOT/locks/                                      flock files (see :mod:`artifactkit.store.locks`)

Everything here reads names only: no manifest is opened, so listing a store is cheap and safe.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable
from typing import Final

import attrs

from artifactkit._syscalls import fsync_dir, rename_noreplace
from artifactkit.errors import NotAStoreError
from artifactkit.store.paths import check_artifact_name


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


def parse_ref(name_or_ref: str, version: int | None = None) -> tuple[str, int | None]:
    """``name``, ``name@V`` or ``name`` + ``version`` -> (checked name, version or ``None`` for the latest).

    ``demo@0``, ``demo@-1`` and ``demo@x`` are the same mistake and get the same answer, for every store.
    """
    name = name_or_ref
    if version is None and "@" in name:
        name, _, text = name.rpartition("@")
        if not text.removeprefix("-").isdigit():
            raise ValueError(f"version {text!r} of {name!r} must be a positive integer (1, 2, ...)")
        version = int(text)
    if version is not None and version < 1:
        raise ValueError(f"version {str(version)!r} of {name!r} must be a positive integer (1, 2, ...)")
    check_artifact_name(name)
    return name, version


@attrs.frozen
class StoreLayout:
    """Where a store keeps what: directory paths derived from its root, and name-only look-ups."""

    root: str
    blobs_dir: str
    manifests_dir: str
    staging_dir: str
    locks_dir: str

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> StoreLayout:
        """The layout of the store rooted at ``root`` (made absolute; nothing is created)."""
        top = os.path.abspath(os.fspath(root))
        return cls(top, *(os.path.join(top, sub) for sub in ("blobs", "manifests", "staging", "locks")))

    def blob_path(self, sha: str) -> str:
        """Where the blob with digest ``sha`` lives."""
        return os.path.join(self.blobs_dir, sha)

    def manifest_path(self, ref: ArtifactRef) -> str:
        """Where the manifest of ``ref`` lives."""
        return os.path.join(self.manifests_dir, ref.name, f"{ref.version}.{ref.digest}.json")

    def versions(self, name: str) -> list[tuple[int, str]]:
        """(version, digest) pairs of ``name``, from file names alone (no manifest is read)."""
        try:
            names = os.listdir(os.path.join(self.manifests_dir, name))
        except (FileNotFoundError, NotADirectoryError):
            return []  # no such name, or a stray file in manifests/: not a version either way
        found = []
        for filename in names:
            match = _VERSION_FILE.fullmatch(filename)
            if match:
                found.append((int(match[1]), match[2]))
        return sorted(found)

    def refs(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version."""
        try:
            names = os.listdir(self.manifests_dir)
        except FileNotFoundError:
            return []
        return sorted(ArtifactRef(name, version, digest)
                      for name in names for version, digest in self.versions(name))

    def require_store(self) -> None:
        """Raise :class:`NotAStoreError` unless a store lives at ``root``.

        Reading a missing store as an empty one turned a typo in CI into "0 versions: clean".
        """
        if os.path.isdir(self.manifests_dir):
            return
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise NotAStoreError(f"no artifactkit store at {self.root}: it is a file, not a directory",
                                 path=self.root)
        raise NotAStoreError(f"no artifactkit store at {self.root}", path=self.root)

    def create(self) -> None:
        """Create the store, its missing parents and layout dirs, and make each durable in its parent.

        A visible manifest is only as durable as every directory above it: without these fsyncs a
        power cut after the first publish returned could lose ``blobs/`` or the whole store.
        """
        missing = []
        top = self.root
        while not os.path.lexists(top):
            missing.append(top)
            top = os.path.dirname(top)
        if not os.path.isdir(top) or (os.path.exists(self.root) and not os.path.isdir(self.root)):
            raise NotAStoreError(f"cannot make an artifactkit store at {self.root}: {top} is a file, "
                                 "not a directory", path=self.root)
        for path in (*reversed(missing), self.blobs_dir, self.manifests_dir, self.staging_dir, self.locks_dir):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o755)
        # Whoever created them: a publisher killed between its mkdir and its fsync would otherwise
        # leave layout dirs that no later publisher ever makes durable.
        for path in (self.root, *missing):
            fsync_dir(path)
        fsync_dir(os.path.dirname(missing[-1] if missing else self.root) or "/")


def commit_name(staged: str, final: str) -> None:
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


#: Listing ``blobs/`` costs about a tenth of a ``stat`` per name listed (on tmpfs: 0.3 against 2.5 us; a ``stat``
#: of a missing name, with its FileNotFoundError, 4.1 us).
LIST_BLOBS_PER_LOOKUP: Final = 4


def blob_lookup(blobs_fd: int, lookups: int) -> Callable[[str], bool]:
    """Whether a blob is in the store, for about ``lookups`` questions: one listing of ``blobs/`` if that is
    cheaper than a ``stat`` each, else a ``stat`` each. A directory's size bounds its entries from above: at
    least 20 bytes each on tmpfs (its exact figure), ext4, xfs and btrfs.

    The caller holds the store's lock, so ``gc`` (which takes it exclusively) cannot remove a blob between an
    answer and the commit. A listing can only miss a blob a concurrent publisher adds after it: that
    content is then staged again and its rename swaps in the same bytes, as when both publish at once.
    """
    if lookups == 0 or os.fstat(blobs_fd).st_size // 20 > LIST_BLOBS_PER_LOOKUP * lookups:
        return lambda sha: exists_at(blobs_fd, sha)
    return set(os.listdir(blobs_fd)).__contains__


def exists_at(dir_fd: int, name: str) -> bool:
    """Whether ``name`` exists in the directory ``dir_fd`` (a link counts; it is not followed)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True

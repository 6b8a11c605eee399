"""The bottom of the store: its directory layout and version names.

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
from typing import Final

import attrs

from artifactkit._mounts import mount_info
from artifactkit._syscalls import fsync_dir, rename_noreplace
from artifactkit.errors import NotAStoreError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.paths import check_artifact_name

# "<version>.<sha256>.json": ASCII digits without a leading zero, so "01." and "1." or "²" never
# name a version, and a stray file in a name's directory is simply not one.
VERSION_FILE: Final = re.compile(r"([1-9][0-9]*)\.([0-9a-f]{64})\.json", re.ASCII)


_VERSION_TEXT: Final = re.compile(r"-?[0-9]+", re.ASCII)


def parse_ref(name_or_ref: str, version: int | None = None) -> tuple[str, int | None]:
    """``name``, ``name@V`` or ``name`` + ``version`` -> (checked name, version or ``None`` for the latest).

    ``demo@0``, ``demo@-1`` and ``demo@x`` are the same mistake and get the same answer, for every store.
    """
    name = name_or_ref
    if version is None and "@" in name:
        name, _, text = name.rpartition("@")
        if not _VERSION_TEXT.fullmatch(text):  # str.isdigit() takes fullwidth and superscript digits
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

    def check_site(self) -> None:
        """Refuse to make a store where something else is: :class:`NotAStoreError` unless the root is missing
        (under a directory), an empty directory, or a store (it has ``manifests/``, or holds nothing but layout
        names: a store another publisher is creating, or one a kill interrupted).

        A typo'd ``--store`` used to grow a new store, and a folder of the user's own files got ``blobs/``,
        ``manifests/``, ``locks/`` and ``staging/`` added beside them: nothing is created in either case now.
        """
        top = self.root
        while not os.path.lexists(top):
            top = os.path.dirname(top)
        if top != self.root:
            if not os.path.isdir(top):
                raise NotAStoreError(f"cannot make an artifactkit store at {self.root}: {top} is a file, "
                                     "not a directory", path=self.root)
            return
        try:
            names = set(os.listdir(self.root))
        except NotADirectoryError:
            raise NotAStoreError(f"cannot make an artifactkit store at {self.root}: it is a file, not a directory; "
                                 "artifactkit changed nothing", path=self.root) from None
        others = sorted(names - STORE_NAMES)
        if others and "manifests" not in names:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise NotAStoreError(f"{self.root} is not an artifactkit store (it holds {shown}) and is not empty: "
                                 "artifactkit changed nothing; give a missing path, an empty directory or a store",
                                 path=self.root)

    def create(self) -> None:
        """Create the store, its missing parents and layout dirs, and make each durable in its parent.

        Only where :meth:`check_site` allows (checked again here: the caller's check came before its scan).
        The path up to the root is the user's (followed as given); the layout dirs are made through the
        root's fd, ``manifests/`` first, so that whoever looks meanwhile sees a store;
        :func:`~artifactkit.store.store_dirs.opened_store` checks them before any use.
        A visible manifest is only as durable as every directory above it: without these fsyncs a
        power cut after the first publish returned could lose ``blobs/`` or the whole store.
        """
        self.check_site()
        missing = []
        top = self.root
        while not os.path.lexists(top):
            missing.append(top)
            top = os.path.dirname(top)
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o755)
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for sub in _CREATED:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(sub, 0o755, dir_fd=root_fd)
            # Whoever created them: a publisher killed between its mkdir and its fsync would otherwise
            # leave layout dirs that no later publisher ever makes durable.
            os.fsync(root_fd)
        finally:
            os.close(root_fd)
        for path in missing[1:]:
            fsync_dir(path)
        fsync_dir(os.path.dirname(missing[-1] if missing else self.root) or "/")


#: A store's layout dirs in the order they are made: ``manifests`` first, the one that makes it a store.
_CREATED: Final = ("manifests", "blobs", "staging", "locks")
#: Every name a store's root holds: its layout dirs and ``stat-cache.json``, where versions before the stat cache
#: moved to the user's cache directory kept it (never read now; tolerated so that their stores stay valid).
STORE_NAMES: Final = frozenset((*_CREATED, "stat-cache.json"))


def commit_name(src_fd: int, src: str, dst_fd: int, dst: str, *, where: str = "") -> None:
    """Make ``dst`` appear atomically in the directory ``dst_fd``, never replacing anything (the name lock
    is held too); both names are resolved from directory fds, never a path (``where``: the directory an error
    names them in)."""
    try:
        rename_noreplace(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        # NFS and some FUSE filesystems lack RENAME_NOREPLACE; link(2) fails on an existing name
        # just as atomically, and the staged name is then dropped.
        try:
            os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except OSError as link_err:
            if link_err.errno not in _NO_LINK:
                raise
            raise _not_atomic(dst_fd, err, link_err, os.path.join(where, src), os.path.join(where, dst)) from link_err
        os.unlink(src, dir_fd=src_fd)


#: What ``link(2)`` answers on a filesystem without hard links: s3fs ``ENOTSUP``, rclone mount ``EIO``, vfat
#: ``EPERM``, mergerfs with ``func.link=erofs`` ``EROFS``. Met right after ``RENAME_NOREPLACE`` was refused (in a
#: directory a publish has just written to), an ``EIO`` or ``EROFS`` is that too, and the message names it.
_NO_LINK: Final = frozenset({errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS, errno.EIO, errno.EROFS})


def _not_atomic(dir_fd: int, rename_err: OSError, link_err: OSError, src: str, dst: str) -> OSError:
    try:
        fs_type = mount_info(f"/proc/self/fd/{dir_fd}").fs_type
    except OSError:
        fs_type = "unknown"
    code = errno.errorcode.get
    message = (f"cannot commit atomically: this filesystem ({fs_type}) supports neither renameat2(RENAME_NOREPLACE) "
               f"({code(rename_err.errno or 0)}) nor link(2) ({code(link_err.errno or 0)}), the two calls that add a "
               "name without replacing another publisher's; nothing was committed: put the store on a filesystem "
               "that has either")
    return OSError(link_err.errno, message, src, None, dst)


def check_commit(dir_fd: int, where: str) -> None:
    """Fail at once, before a publish moves anything, where :func:`commit_name` cannot work: a scratch file in the
    directory ``dir_fd`` (a publish's own staging directory, ``where``) committed to a second name there, then
    removed."""
    first, second = ".commit-check", ".commit-check.done"
    os.close(os.open(first, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd))
    try:
        commit_name(dir_fd, first, dir_fd, second, where=where)
        os.unlink(second, dir_fd=dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(first, dir_fd=dir_fd)

"""A store's layout directories, opened once from its root and checked: every later access is relative to them.

A store is shared: whoever can write it can replace ``blobs/`` or ``staging/`` by a symlink to any directory.
Reached by path, that link was followed: ``gc`` listed its target, called everything there an orphan and
deleted it (a home directory emptied in the trial), and ``publish`` wrote blobs and locks through it. So the
root is opened once (the user's path, links and all: it is the user's choice), each layout directory is
opened beneath it with ``O_NOFOLLOW`` and must be a real directory owned by the store's owner or root, and
every name below is resolved from one of these fds (never a path): a directory swapped *after* the check is
no longer the one the fd names, so nothing outside the store is ever reached through it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Final

import attrs

from artifactkit.errors import NotAStoreError, UnsafeStoreError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.layout import VERSION_FILE, StoreLayout

LAYOUT_DIRS: Final = ("blobs", "manifests", "staging", "locks")
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_CHECKED_DIR: Final = _DIR | os.O_NOFOLLOW


@attrs.define
class StoreDirs:
    """Open, checked fds of a store's root and layout directories (closed by :func:`opened_store`)."""

    layout: StoreLayout
    root: int
    blobs: int
    manifests: int
    staging: int
    locks: int

    def versions(self, name: str) -> list[tuple[int, str]]:
        """(version, digest) pairs of ``name``, from file names alone (no manifest is read)."""
        fd = self.name_dir(name)
        if fd is None:
            return []
        try:
            names = os.listdir(fd)
        finally:
            os.close(fd)
        return sorted((int(match[1]), match[2]) for match in map(VERSION_FILE.fullmatch, names) if match)

    def refs(self) -> list[ArtifactRef]:
        """Every visible version, sorted by name then version."""
        return sorted(ArtifactRef(name, version, digest)
                      for name in os.listdir(self.manifests) for version, digest in self.versions(name))

    def name_dir(self, name: str, *, create: bool = False) -> int | None:
        """``manifests/<name>`` as an fd the caller closes; ``None`` if absent or a stray file (not a version).

        Another user of a shared store may have made it, so only its kind is checked, not its owner: a
        symlink there would take a publish's manifest, and gc's view of what is referenced, outside the store.
        """
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=self.manifests)
        try:
            return open_checked(self.manifests, name, f"{self.layout.manifests_dir}/{name}", owners=None)
        except FileNotFoundError:
            return None
        except UnsafeStoreError as err:
            if getattr(err, "why", None) == "not a directory":
                return None
            raise


def open_checked(parent_fd: int, name: str, where: str, *, owners: tuple[int, ...] | None) -> int:
    """Open the directory ``name`` beneath ``parent_fd`` without following a link; with ``owners``, it must
    belong to one of them. :class:`UnsafeStoreError` names ``where`` otherwise (``FileNotFoundError`` if absent)."""
    try:
        fd = os.open(name, _CHECKED_DIR, dir_fd=parent_fd)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            is_link = stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode)
        except OSError:
            is_link = False
        why = "a symlink" if is_link else "not a directory"
        raise UnsafeStoreError(f"{where} is {why}, not a real directory: artifactkit follows no link in a store's "
                               "layout and changed nothing; remove it or use another store", path=where,
                               why=why) from err
    if owners is not None:
        uid = os.fstat(fd).st_uid
        if uid not in owners:
            os.close(fd)
            raise UnsafeStoreError(f"{where} is owned by uid {uid}, not by the store's owner (uid {owners[0]}) or "
                                   "root: another user could have made it; artifactkit changed nothing",
                                   path=where, why=f"owned by uid {uid}")
    return fd


@contextlib.contextmanager
def opened_store(layout: StoreLayout, *, create: bool = False) -> Iterator[StoreDirs]:
    """The store at ``layout.root`` with its layout directories checked (:class:`NotAStoreError` if there is no
    store: no ``manifests/``); ``create`` makes its other missing layout directories (a store of an older layout)."""
    try:
        root = os.open(layout.root, _DIR)
    except (FileNotFoundError, NotADirectoryError) as err:
        what = ": it is a file, not a directory" if os.path.lexists(layout.root) else ""
        raise NotAStoreError(f"no artifactkit store at {layout.root}{what}", path=layout.root) from err
    fds: list[int] = []
    try:
        owners = (os.fstat(root).st_uid, 0)
        for name in LAYOUT_DIRS:
            where = f"{layout.root}/{name}"
            try:
                fds.append(open_checked(root, name, where, owners=owners))
            except FileNotFoundError:
                if name == "manifests":  # a typo'd path must not read as an empty store, nor grow one here
                    raise NotAStoreError(f"no artifactkit store at {layout.root}", path=layout.root) from None
                if not create:
                    fds.append(-1)  # a store older than this layout dir: nothing of it to read
                    continue
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=root)
                fds.append(open_checked(root, name, where, owners=owners))
        yield StoreDirs(layout, root, *fds)
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)
        os.close(root)


def listdir_fd(fd: int) -> list[str]:
    """Sorted names in the directory ``fd`` (``-1``, a layout dir this store never had: none)."""
    return sorted(os.listdir(fd)) if fd >= 0 else []


def fsync_fd_dir(fd: int) -> None:
    """fsync an open directory, so the names created or renamed in it survive a power cut."""
    os.fsync(fd)

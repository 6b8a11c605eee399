"""The directory backend: a store rooted at a local path (:mod:`~artifactkit.store.layout` for its layout).

Every name is reached from the checked directory fds :func:`~artifactkit.store.store_dirs.opened_store`
opened once per operation, never by a path a writer of the store could swap. Publishers share the store's
``flock`` and gc takes it exclusively; a version is claimed by ``RENAME_NOREPLACE`` under the name's lock;
the durability barrier is one ``syncfs`` over the transaction's staging before any blob is renamed in.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Final

from artifactkit._fsutil import remove_tree
from artifactkit._syscalls import syncfs
from artifactkit.engine.blob_check import HasBlob, blob_lookup
from artifactkit.engine.blobs import BlobsNeeded, BlobSource
from artifactkit.engine.content import open_blob, sha256_of_fd, write_staged
from artifactkit.engine.values import ReadBatch
from artifactkit.errors import UnsafeStoreError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.backend import Garbage, Guard, Mover
from artifactkit.store.blob_moves import HeldMoves, Moving, spill
from artifactkit.store.cleanup import cleaning_up
from artifactkit.store.layout import StoreLayout, check_commit, commit_name
from artifactkit.store.local_forget import LocalForgetter, forgetting, held, highest_taken
from artifactkit.store.locks import name_lock, store_lock, store_lock_if_free
from artifactkit.store.manifest_file import read_manifest_bytes, read_tree_object
from artifactkit.store.needed_blobs import NeededBlobs
from artifactkit.store.progress import Reporter
from artifactkit.store.stat_cache import StatCache
from artifactkit.store.stat_cache_file import local_site
from artifactkit.store.store_dirs import StoreDirs, fsync_fd_dir, listdir_fd, opened_store

#: ``st_blocks`` counts 512-byte units on Linux whatever the filesystem's block size (stat(2)).
_BLOCK_UNIT = 512
#: The staged manifest's name in a transaction directory.
_MANIFEST = "manifest.json"


class _Held:
    """An ``flock`` is held until released: nothing can make it lapse, so there is nothing to check."""

    def check(self) -> None:
        return None


class LocalBackend:
    """A store in a local directory (``root``: a path, or ``file://`` + an absolute path)."""

    #: The publish transaction's class (the fault suite's broken stores give one that skips a step).
    txn_class: type[LocalTxn]
    #: System calls are not sent again: a directory has no outages to ride out.
    retries = 0

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = os.fspath(root)
        self.layout = StoreLayout.at(path.removeprefix("file://") if path.startswith("file://") else path)
        self.root = self.layout.root
        self._layout_durable = False
        self.txn_class = LocalTxn

    def check_site(self) -> None:
        self.layout.check_site()

    @contextlib.contextmanager
    def open(self, *, create: bool = False, writes: bool = False) -> Iterator[LocalStore]:
        if create and not self._layout_durable:
            # Once per backend: creating and flushing the layout dirs costs four fsyncs.
            self.layout.create()
            self._layout_durable = True
        with opened_store(self.layout, create=create or writes) as dirs:  # a layout dir removed meanwhile is made again
            yield LocalStore(dirs, self.txn_class)

    def stat_cache(self, started_ns: int) -> StatCache:
        # In the user's cache directory, named by the root as it is now (a store not made yet has none).
        try:
            root = os.stat(self.layout.root)
        except OSError:
            return StatCache.load(None, started_ns)
        return StatCache.load(local_site(self.layout.root, root), started_ns)


class LocalStore:
    """A local store opened for one operation: everything through :attr:`dirs`' checked fds."""

    concurrency = 1
    #: Under gc's exclusive lock no publisher runs: every leftover is abandoned, however young.
    default_grace_s = 0.0
    staging_dir = "staging"

    def __init__(self, dirs: StoreDirs, txn_class: type[LocalTxn]) -> None:
        self.dirs = dirs
        self._txn_class = txn_class
        self.where = dirs.layout.root
        self._listed: dict[str, dict[int, str]] = {}

    def versions(self, name: str | None = None) -> list[tuple[str, int]]:
        if name is not None:
            return [(name, version) for version, _ in self.dirs.versions(name)]
        return [(ref.name, ref.version) for ref in self.dirs.refs()]

    def ref(self, name: str, version: int) -> ArtifactRef | None:
        # The digest is in the file's name: nothing is read. One listing per name and operation: list() asks
        # for every version of a name in turn.
        listed = self._listed.get(name)
        if listed is None:
            listed = self._listed[name] = dict(self.dirs.versions(name))
        digest = listed.get(version)
        return None if digest is None else ArtifactRef(name, version, digest)

    def manifest_bytes(self, ref: ArtifactRef, *, check_digest: bool = True) -> tuple[bytes, str]:
        return read_manifest_bytes(self.dirs, ref, check_digest=check_digest), self.dirs.layout.manifest_path(ref)

    def tree_object(self, digest: str) -> bytes:
        return read_tree_object(self.dirs.blobs, digest, where=self.where)

    def blob_digest(self, sha: str, sizes: Collection[int]) -> tuple[int, str | None]:
        # A symlink, FIFO or directory under the name is an IntegrityError (open_blob says which).
        fd = open_blob(sha, sha, where="in the store", dir_fd=self.dirs.blobs)
        try:
            size = os.fstat(fd).st_size
            return size, sha256_of_fd(fd)[0] if size in sizes else None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def quiescent(self) -> Iterator[Callable[[], bool]]:
        # Held exclusively (only if free) for the whole listing: no publisher can have started meanwhile.
        with store_lock_if_free(self.dirs.locks) as held:
            yield lambda: held

    @contextlib.contextmanager
    def publishing(self) -> Iterator[tuple[Guard, LocalTxn]]:
        dirs = self.dirs
        with store_lock(dirs.locks, exclusive=False, where=dirs.layout.locks_dir):
            txn = f"publish-{os.getpid()}-{secrets.token_hex(8)}"
            os.mkdir(txn, 0o700, dir_fd=dirs.staging)
            try:
                txn_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.staging)
                # A filesystem that cannot commit is named before a blob moves.
                check_commit(txn_fd, f"{dirs.layout.staging_dir}/{txn}")
                held = self._txn_class(dirs, f"{dirs.layout.staging_dir}/{txn}", txn_fd)
                try:
                    yield _Held(), held
                except BaseException as err:
                    held.settle(err)  # nothing may still rename out of the staging removed below
                    raise
                finally:
                    os.close(txn_fd)
            finally:
                _remove_staging(dirs.staging, txn)

    def save_stat_cache(self, cache: StatCache, ref: ArtifactRef, order: list[str]) -> None:
        # Not in the store (its other writers could edit it): in the user's cache, named by the root we opened.
        cache.save(local_site(self.dirs.layout.root, os.fstat(self.dirs.root)), ref, order)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[Guard]:
        with store_lock(self.dirs.locks, exclusive=True, where=self.dirs.layout.locks_dir):
            yield _Held()

    def staging_garbage(self, *, measure: bool = True) -> list[Garbage]:
        return _garbage(self.dirs.staging, self.dirs.layout.staging_dir, listdir_fd(self.dirs.staging),
                        measure=measure)

    def blob_garbage(self, needed: NeededBlobs, *, measure: bool = True) -> list[Garbage]:
        return _garbage(self.dirs.blobs, self.dirs.layout.blobs_dir, needed.unneeded(_names(self.dirs.blobs)),
                        measure=measure)

    @contextlib.contextmanager
    def holding(self, name: str, version: int) -> Iterator[None]:
        ref = self.ref(name, version)
        if ref is None:
            raise LookupError(f"{name!r} version {version} vanished from {self.where}")
        with held(self.dirs, ref):
            yield

    def forgetting(self, names: Collection[str]) -> contextlib.AbstractContextManager[LocalForgetter]:
        self._listed.clear()  # refs are read again under the name locks
        return forgetting(self.dirs, names)

    def remove_staging(self, guard: Guard, staging: Sequence[Garbage]) -> None:
        for item in staging:  # a stray file or link in staging/ is a leftover too
            _remove(self.dirs.staging, item.name, self.dirs.layout.staging_dir)

    def remove_blobs(self, guard: Guard, blobs: Sequence[Garbage]) -> None:
        for item in blobs:  # a directory here is not a blob at all: it goes too
            _remove(self.dirs.blobs, item.name, self.dirs.layout.blobs_dir)
        if blobs:
            os.fsync(self.dirs.blobs)

    @contextlib.contextmanager
    def blob_source(self, needed: BlobsNeeded, dest: str, progress: Reporter) -> Iterator[BlobSource]:
        # Blobs are read through the checked fd of blobs/, never by its path.
        progress.advance(needed.count, needed.size)  # nothing to fetch: they are all here
        yield BlobSource(self.dirs.layout.blobs_dir, dir_fd=self.dirs.blobs)


class LocalTxn:
    """A publish's directory in ``staging/``: blobs staged there are renamed into ``blobs/`` at the flush."""

    in_memory = False

    def __init__(self, dirs: StoreDirs, stage_path: str, stage_fd: int) -> None:
        self.dirs = dirs
        self.stage_path = stage_path
        self.stage_fd = stage_fd
        self.blobs_fd = dirs.blobs
        # The batches as their engine holds them (one staged blob a content across the publish), their moves'
        # names made a chunk at a time (a name kept per file was 5.7 MiB of a 100,000-file publish's peak).
        self._held: list[HeldMoves] | None = []
        self._moving: Moving | None = None

    def blob_lookup(self, lookups: int) -> HasBlob:
        return blob_lookup(self.dirs.blobs, lookups)

    def add(self, staged: ReadBatch) -> None:
        if self._held is None:
            raise RuntimeError("a blob added to a sealed transaction")  # a bug: it would never be moved
        self._held.append(staged)

    def spill(self) -> None:
        """The batches held so far let go, their moves kept in a file of staging (:func:`~.blob_moves.spill`)."""
        if self._held is None:
            raise RuntimeError("a sealed transaction spilled")
        self._held = spill(self.stage_fd, self._held)

    def seal(self, move: Mover) -> None:
        if self._held is None:
            raise RuntimeError("a transaction sealed twice")
        held, self._held = self._held, None
        if not any(batch.staged_count() for batch in held):
            # Nothing to make durable: every blob this manifest names passed its own publish's barrier before
            # it reached blobs/. A syncfs on a disk flushes the whole filesystem's dirty data, not only ours.
            return
        self.barrier()
        # Plain renames: if a concurrent publisher committed the same content first, one atomically swaps in
        # identical, already flushed bytes. On a thread: 100,000 of them are 0.3-0.8 s of kernel time, which
        # the manifest's assembly (CPU, in this thread) overlaps; this thread helps once it is done (flush).
        self._moving = Moving(move, self.stage_fd, self.dirs.blobs, held)

    def flush(self, body: bytes) -> None:
        if self._held is not None:
            raise RuntimeError("a transaction flushed before it was sealed")  # a bug: its blobs are not durable
        # The moves end first, so a kill point's order is the same in every run (tests/support/crash.py).
        self.settle(helping=True)
        write_staged(self.stage_fd, _MANIFEST, body, sync=self.sync_file)
        self.sync_dir(self.dirs.blobs)  # also covers blobs we deduplicated against a concurrent publisher

    def settle(self, propagating: BaseException | None = None, *, helping: bool = False) -> None:
        """Wait for the moves :meth:`seal` started (``helping``: taking some of them on this thread); their failure
        is raised, or with ``propagating`` (the publish failed meanwhile) noted on it."""
        moving, self._moving = self._moving, None
        # A failed publish stops the moves at their next chunk: one interrupted as they began waited here for all
        # 100,000 of them (2 s on tmpfs, issue 53).
        failed = moving.wait(helping=helping, cancel=propagating is not None) if moving is not None else None
        if failed is None:
            return
        if propagating is None:
            raise failed
        propagating.add_note(f"moving the staged blobs into blobs/ failed too: {type(failed).__name__}: {failed}")

    # The durability steps, one method each: the fault suite's deliberately broken stores leave one out.
    def barrier(self) -> None:
        """The one barrier: every staged blob is on disk."""
        syncfs(self.stage_fd)

    def sync_file(self, fd: int) -> None:
        """The staged manifest's bytes are on disk (it is written after the barrier, while blobs move)."""
        os.fsync(fd)

    def sync_dir(self, dir_fd: int) -> None:
        """The names just created or renamed in ``dir_fd`` survive a power cut."""
        fsync_fd_dir(dir_fd)

    def latest(self, name: str) -> int:
        return highest_taken(self.dirs, name)

    def claim(self, name: str, version: int, body: bytes, digest: str) -> bool:
        """Rename the flushed manifest into place as ``version`` under the name's lock, through the checked fd
        of ``manifests/<name>``; False if that version or a later one exists (the loop tries the next)."""
        dirs = self.dirs
        with name_lock(dirs.locks, name, where=dirs.layout.locks_dir):
            name_fd = dirs.name_dir(name, create=True)
            if name_fd is None:
                where = f"{dirs.layout.manifests_dir}/{name}"
                raise UnsafeStoreError(f"{where} is not a directory: artifactkit cannot add a version of {name!r} "
                                       "there and changed nothing", path=where, why="not a directory")
            try:
                if highest_taken(dirs, name) >= version:  # a version, or a forgotten newest one's marker
                    return False
                commit_name(self.stage_fd, _MANIFEST, name_fd, f"{version}.{digest}.json")
                self.sync_dir(name_fd)
            finally:
                os.close(name_fd)
            if version == 1:
                # Also when the dir already existed: a publisher killed between its mkdir and this
                # fsync left a name dir that a power cut could still take with our version in it.
                self.sync_dir(dirs.manifests)
        return True


def _remove_staging(staging_fd: int, txn: str) -> None:
    """Remove a publish's transaction directory; a Ctrl-C never cuts it short, and once one is part of it, it
    stops after :data:`~artifactkit.store.cleanup.CLEANUP_BUDGET_S`, leaving the rest in ``staging/`` for gc.

    Through dir_fd, following no link (the name is inside staging/). The executor stopped every batch before an
    exception reached here: nothing still writes in it.
    """
    with cleaning_up() as over:
        remove_tree(txn, dir_fd=staging_fd, ignore_errors=True, stop=over)


#: How deep gc walks a leftover in ``staging/`` or ``blobs/``. The store makes nothing deeper than
#: ``staging/<txn>/<file>``; a writer of the store can make a chain of any depth, and Python's own walks recurse
#: (one 1,200 deep was a ``RecursionError`` out of gc).
LEFTOVER_DEPTH: Final = 256
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _too_deep(where: str, name: str) -> UnsafeStoreError:
    return UnsafeStoreError(f"{where}/{name} is nested more than {LEFTOVER_DEPTH} directories deep, which no store "
                            f"makes: gc stops before it removes anything from {where}; remove it by hand (rm -rf)")


def _remove(parent_fd: int, name: str, where: str) -> None:
    if stat.S_ISDIR(os.lstat(name, dir_fd=parent_fd).st_mode):
        try:
            shutil.rmtree(name, dir_fd=parent_fd)
        except RecursionError:  # made deeper since gc measured it: a writer of the store at work
            raise _too_deep(where, name) from None
    else:
        os.unlink(name, dir_fd=parent_fd)


def _names(dir_fd: int) -> Iterator[str]:
    """The names in ``dir_fd`` (``-1``: none), a ``getdents`` batch at a time: ``blobs/`` may hold millions."""
    if dir_fd < 0:
        return
    os.lseek(dir_fd, 0, os.SEEK_SET)  # scandir reads on from the fd's offset (listdir rewinds it; scandir does not)
    with os.scandir(dir_fd) as listing:
        yield from (entry.name for entry in listing)


def _garbage(dir_fd: int, where: str, names: Iterable[str], *, measure: bool) -> list[Garbage]:
    """``names`` (none needed) in ``dir_fd``, each with its age (from its ctime, which no ``utime`` sets) and, if
    ``measure``, the bytes its removal frees."""
    now = time.time()
    found = []
    for name in names:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            continue  # removed since the listing (a concurrent gc's sweep, a publish's rename): not a leftover now
        found.append(Garbage(name, _allocated(dir_fd, name, st, where) if measure else 0,
                             max(0.0, now - st.st_ctime)))
    return found


def _allocated(parent_fd: int, name: str, st: os.stat_result, where: str) -> int:
    """Bytes that removing ``name`` (and, for a directory, everything under it) gives back: the blocks of
    every inode whose last name goes with it (a file with another name frees nothing). A walk with a stack of
    its own, no deeper than :data:`LEFTOVER_DEPTH` (:class:`UnsafeStoreError` past it, before gc removes
    anything)."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * _BLOCK_UNIT if st.st_nlink <= 1 else 0
    total = st.st_blocks * _BLOCK_UNIT
    fds: list[int] = []  # the open directories from ``name`` down, and the names each has left to measure
    left: list[list[str]] = []
    try:
        fds.append(os.open(name, _DIR_FLAGS, dir_fd=parent_fd))
        left.append(os.listdir(fds[-1]))
        while fds:
            if not left[-1]:
                os.close(fds.pop())
                left.pop()
                continue
            child = left[-1].pop()
            found = os.lstat(child, dir_fd=fds[-1])
            if not stat.S_ISDIR(found.st_mode):
                total += found.st_blocks * _BLOCK_UNIT if found.st_nlink <= 1 else 0
                continue
            total += found.st_blocks * _BLOCK_UNIT
            if len(fds) >= LEFTOVER_DEPTH:
                raise _too_deep(where, name)
            fds.append(os.open(child, _DIR_FLAGS, dir_fd=fds[-1]))
            left.append(os.listdir(fds[-1]))
    finally:
        for fd in fds:
            os.close(fd)
    return total

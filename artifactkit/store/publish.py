"""Publish: capture, read once into staging, one flush barrier, then make it visible.

Durability: all of a publish's new blobs and its manifest are written into staging, then *one*
``syncfs`` barrier flushes them all, then blobs are renamed into place and ``blobs/`` is fsynced,
then the manifest is renamed under the name's lock and its directory is fsynced. A visible name
therefore always refers to flushed bytes (git's ``fsyncMethod=batch``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence

import attrs

from artifactkit._syscalls import syncfs
from artifactkit.errors import UnsafeStoreError
from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.content import SourceRead, read_source, write_staged
from artifactkit.store.layout import ArtifactRef, HasBlob, blob_lookup, commit_name
from artifactkit.store.locks import name_lock, store_lock
from artifactkit.store.manifest import (
    check_representable,
    digest_of,
    encode_entry,
    file_line,
    manifest_bytes,
)
from artifactkit.store.paths import LinkPolicy, check_artifact_name, check_link_policy, check_links_contained
from artifactkit.store.scan import CacheHits, ScannedTree, capture_again, scan_tree
from artifactkit.store.stage import Staged, StageItem, StageShared, stage_file, staged_path, to_wire
from artifactkit.store.stat_cache import StatCache
from artifactkit.store.store_dirs import StoreDirs, fsync_fd_dir
from artifactkit.store.workers import LazyPool, batches

#: A staged file: ``(directory fd, name in it)``.
Staging = tuple[int, str]
#: Makes a staged manifest visible as the next version of a name: ``(store, name, staged, digest)``.
CommitManifest = Callable[[StoreDirs, str, Staging, str], ArtifactRef]


def with_content(entry: FileMeta, sha: str, flags: int | None, extents: Extents | None) -> FileMeta:
    """``entry`` with what its read found (direct construction: ``attrs.evolve`` costs 6 us a file; positional,
    in ``model.FIELD_ORDER``: keywords cost as much again)."""
    return FileMeta(entry.path, entry.kind, entry.mode, entry.mtime_ns, entry.atime_ns, entry.size, sha, entry.target,
                    entry.ctime_ns, entry.uid, entry.gid, entry.xattrs, entry.hardlink, entry.nlink, extents, flags)


def capture_source(src: str | os.PathLike[str], on_progress: Callable[[int], None] | None = None, *,
                   cached: CacheHits | None = None, links: LinkPolicy = "as-is") -> ScannedTree:
    """Every ``lstat`` of the source before any read, refused early if a manifest could not hold it.
    ``on_progress(entries so far)`` is called as the scan goes (a worker pool starts on it); ``cached``
    is the stat cache (:class:`~artifactkit.store.stat_cache.StatCache`); ``links="contained"`` refuses a
    tree with links that may leave it (:func:`~artifactkit.store.paths.check_links_contained`)."""
    if check_link_policy(links) == "contained":
        # Every link must be in ``entries`` to be checked: the cache's listing and entry hits would leave
        # some out. Its content hits (by inode, in publish_tree) still spare the reads of unchanged files.
        cached = None
    tree = scan_tree(src, on_progress=on_progress, cached=cached)
    where = f"publish of {os.fspath(src)!r}"
    if links == "contained":
        check_links_contained(tree.entries, where=where)
    check_representable(tree.entries, where=where)
    return tree


def read_files(tree: ScannedTree, stage_fd: int) -> Iterator[tuple[FileMeta, SourceRead | None, str]]:
    """Every entry of ``tree`` in order, each regular file read once, with the staging name its bytes may
    take. Not read (``None``): directories, links, and the later names of a hard link, which get the first
    name's facts from :func:`fill_hardlinks`."""
    for index, entry in enumerate(tree.entries):
        stage_name = f"blob-{index}"
        if entry.kind != "file" or entry.hardlink is not None:
            yield entry, None, stage_name
        else:
            yield entry, read_source(f"{tree.root}/{entry.path}", entry, tree.identities[entry.path],
                                     stage_fd=stage_fd, stage_name=stage_name), stage_name


def fill_hardlinks(entries: list[FileMeta], read: dict[str, FileMeta]) -> list[FileMeta]:
    """One inode, one read: the other names of a hard link share its content, flags and holes."""
    return [entry if entry.hardlink is None or entry.kind != "file" else
            attrs.evolve(entry, sha256=read[entry.hardlink].sha256, flags=read[entry.hardlink].flags,
                         extents=read[entry.hardlink].extents)
            for entry in entries]


def publish_tree(dirs: StoreDirs, tree: ScannedTree, name: str, *, commit: CommitManifest,
                 cache: StatCache | None = None, workers: int | None = None,
                 pool: LazyPool | None = None) -> ArtifactRef:
    """Publish a captured tree as the next version of ``name``; visible only once complete.

    ``dirs``: the store, opened and checked (:func:`~artifactkit.store.store_dirs.opened_store`); every
    name is reached from its fds. With ``cache`` (loaded before the scan), files
    it vouches for are not read (:mod:`~artifactkit.store.stat_cache` says what that trusts) and it
    records every file's read for the next publish; the caller saves it. ``workers`` is
    :func:`~artifactkit.store.workers.choose_workers`'s: how many processes read and stage the files
    (or ``pool``, already started by the caller during its scan; the caller closes it).
    """
    check_artifact_name(name)
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(LazyPool(workers, "publish"))
        with store_lock(dirs.locks, exclusive=False, where=dirs.layout.locks_dir):
            txn = f"publish-{os.getpid()}-{secrets.token_hex(8)}"
            os.mkdir(txn, 0o700, dir_fd=dirs.staging)
            try:
                txn_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.staging)
                try:
                    return _publish_staged(dirs, tree, name, (txn, txn_fd), commit, cache=cache, pool=pool)
                finally:
                    os.close(txn_fd)
            except BaseException:
                pool.close()  # no child may still write into txn when it is removed
                raise
            finally:
                # dir_fd: rmtree's fd-based walk, which follows no link (the name is inside staging/).
                shutil.rmtree(txn, dir_fd=dirs.staging, ignore_errors=True)


def _read_all(tree: ScannedTree, todo: list[StageItem], *, txn: str, txn_fd: int, blobs_dir: str, blobs_fd: int,
              has_blob: HasBlob, pool: LazyPool) -> list[Staged]:
    workers = pool.get(len(todo))
    seen: set[str] = set()
    if workers is None:
        return [stage_file(tree.root, item, txn_fd, has_blob, seen, read=read_source) for item in todo]
    st = os.fstat(txn_fd)
    blobs = os.fstat(blobs_fd)
    shared: StageShared = (tree.root, txn, (st.st_dev, st.st_ino), blobs_dir, (blobs.st_dev, blobs.st_ino),
                           len(todo))

    def local(batch: Sequence[StageItem]) -> list[Staged]:
        return [stage_file(tree.root, item, txn_fd, has_blob, seen, read=read_source) for item in batch]
    done = workers.run(shared, batches(todo), local, wire=lambda batch: [to_wire(item) for item in batch])
    return [staged for batch in done for staged in batch]


def _cached_lines(tree: ScannedTree, has_blob: HasBlob,
                  cache: StatCache | None) -> tuple[list[tuple[str, str]], list[FileMeta]]:
    """The manifest lines of the entries the stat cache recognized whose blob is still here, and the
    rest of them captured again (as the scan would have), to read."""
    hits = tree.cached
    gone: list[str] = []
    if cache is not None and tree.matched:  # whole listings matched: their lines are the recorded ones
        matched, gone = cache.matched_lines(tree.matched)
        hits = {**hits, **matched}
    lines = []
    for path, (line, sha) in hits.items():  # one pass: it runs once per entry of an unchanged tree
        if sha is None or has_blob(sha, None):
            lines.append((path, line))
        else:
            gone.append(path)
    again = []
    for path in sorted(gone):  # gc took the blob: read and store it again
        again.append(capture_again(tree, path))
        if cache is not None:
            cache.forget(path)
    return lines, again


def _publish_staged(dirs: StoreDirs, tree: ScannedTree, name: str, txn: tuple[str, int], commit: CommitManifest, *,
                    cache: StatCache | None, pool: LazyPool) -> ArtifactRef:
    txn_name, txn_fd = txn
    staged: dict[str, str] = {}  # digest -> staging file name
    all_noatime = tree.listed_noatime
    blobs_fd = dirs.blobs
    # One answer for the hits and the reads: a new file's missing blob cost a stat and its exception
    # (4.1 us) where the usual new store lists in microseconds.
    has_blob = blob_lookup(blobs_fd, len(tree.cached) + len(tree.matched)
                           + sum(1 for e in tree.entries if e.kind == "file"))
    if cache is not None and (same := cache.unchanged_manifest(dirs, name, len(tree.identities),
                                                               tree.listed_noatime, has_blob)) is not None:
        # An unchanged tree: the recorded version's manifest, verified, is this one's, byte for byte.
        write_staged(txn_fd, "manifest.json", same[0])
        syncfs(txn_fd)
        fsync_fd_dir(blobs_fd)  # a blob a concurrent publisher just renamed in may be one of these
        return commit(dirs, name, (txn_fd, "manifest.json"), same[1])
    lines, again = _cached_lines(tree, has_blob, cache)
    captured_entries = [*tree.entries, *again]
    content: dict[int, tuple[str, int | None, Extents | None]] = {}  # index -> what its read found
    todo: list[StageItem] = []
    for index, entry in enumerate(captured_entries):
        if entry.kind != "file" or entry.hardlink is not None:
            continue  # a later name of a hard link gets its first name's facts from fill_hardlinks
        identity = tree.identities[entry.path]
        # A content hit: not read, nothing staged (a digest whose blob gc took is read and stored again).
        hit = cache.lookup(entry, identity) if cache is not None else None
        if hit is not None and has_blob(hit.sha256, entry.size):
            content[index] = (hit.sha256, hit.flags, hit.extents)
        else:
            todo.append((index, entry, identity))
    # Workers open the transaction and blobs/ by path and check each is this inode (open_same_dir).
    for found in _read_all(tree, todo, txn=f"{dirs.layout.staging_dir}/{txn_name}", txn_fd=txn_fd,
                           blobs_dir=dirs.layout.blobs_dir, blobs_fd=blobs_fd,
                           has_blob=has_blob, pool=pool):
        position, sha, noatime, flags, extents, is_staged, _ = found
        all_noatime = all_noatime and noatime
        content[position] = (sha, flags, extents)
        if is_staged and sha in staged:
            os.unlink(staged_path(found), dir_fd=txn_fd)  # another worker staged the same content
        elif is_staged:
            staged[sha] = staged_path(found)
    entries: list[FileMeta] = []
    read: dict[str, FileMeta] = {}  # path -> entry with content facts, for the other names of a hard link
    for index, captured in enumerate(captured_entries):
        facts = content.get(index)
        if facts is None:
            entries.append(captured)
            continue
        sha, flags, extents = facts
        # The usual file goes straight to its line: no second FileMeta (the cache records entries,
        # and a first name's facts are copied to its other names, so those take the long way).
        if (cache is None and extents is None and captured.nlink in (None, 1)
                and (line := file_line(captured, sha, flags)) is not None):
            lines.append((captured.path, line))
            continue
        entries.append(read.setdefault(captured.path, with_content(captured, sha, flags, extents)))
    for entry in fill_hardlinks(entries, read):
        line = encode_entry(entry)
        lines.append((entry.path, line))
        if cache is not None:
            cache.record(entry, tree.identities[entry.path], line)
    body = manifest_bytes(name, all_noatime, lines)
    digest = digest_of(body)
    write_staged(txn_fd, "manifest.json", body)
    syncfs(txn_fd)  # the one barrier: every staged blob and the manifest are on disk
    for sha, stage_name in staged.items():
        # Plain rename: if a concurrent publisher committed the same content first, this
        # atomically swaps in identical, already flushed bytes (and costs no ctypes call).
        os.rename(stage_name, sha, src_dir_fd=txn_fd, dst_dir_fd=blobs_fd)
    fsync_fd_dir(blobs_fd)  # also covers blobs we deduplicated against a concurrent publisher
    return commit(dirs, name, (txn_fd, "manifest.json"), digest)


def commit_manifest(dirs: StoreDirs, name: str, staged: Staging, digest: str) -> ArtifactRef:
    """Rename a flushed manifest into place as the next version of ``name``, under the name's lock, through
    the checked fd of ``manifests/<name>`` (never a path a writer of the store could have swapped)."""
    with name_lock(dirs.locks, name, where=dirs.layout.locks_dir):
        name_fd = dirs.name_dir(name, create=True)
        if name_fd is None:
            where = f"{dirs.layout.manifests_dir}/{name}"
            raise UnsafeStoreError(f"{where} is not a directory: artifactkit cannot add a version of {name!r} "
                                   "there and changed nothing", path=where, why="not a directory")
        try:
            version = max((v for v, _ in dirs.versions(name)), default=0) + 1
            commit_name(*staged, name_fd, f"{version}.{digest}.json")
            fsync_fd_dir(name_fd)
        finally:
            os.close(name_fd)
        if version == 1:
            # Also when the dir already existed: a publisher killed between its mkdir and this
            # fsync left a name dir that a power cut could still take with our version in it.
            fsync_fd_dir(dirs.manifests)
    return ArtifactRef(name=name, version=version, digest=digest)

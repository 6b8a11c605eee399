"""The reference engine's per-file work of a download: create each entry beneath the private directory, its
content verified as written and its metadata restored, and read it back.

Everything is reached through directory fds (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``,
``O_EXCL | O_NOFOLLOW``), so neither a forged manifest path nor a symlink planted mid-download can make a write
land outside the tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence

from artifactkit._fsutil import naming
from artifactkit._os_calls import named
from artifactkit._syscalls import open_beneath
from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.content import (
    IN_MEMORY_LIMIT,
    check_blob_fd,
    copy_sparse,
    hash_while_copying,
    read_small,
    write_all,
)
from artifactkit.engine.protocol import CreateJob
from artifactkit.engine.reference.restore_meta import apply_fd, apply_symlink, create_special
from artifactkit.engine.values import CreateItem, Layout
from artifactkit.errors import IntegrityError, IntegrityFailure, UnsafePathError
from artifactkit.manifest.limits import MAX_EXTENTS
from artifactkit.manifest.paths import parent_of
from artifactkit.metadata.extended import data_extents
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import deepest_first, shallowest_first, verify_stored

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: An engine's creation of a layout's items (``job``, the items), its progress told through ``job.on_batch``.
Creator = Callable[[CreateJob, Sequence[CreateItem]], None]


def create_tree(job: CreateJob, layout: Layout, create: Creator) -> None:
    """Make ``layout`` beneath ``job.root_fd``: the directories, the items by ``create`` (an engine's: the
    reference's :func:`create_items`, or the core's), the hard links' later names, then directory times."""
    root_fd = job.root_fd
    made_before = layout.made_before
    # What each directory holds that is read back at the end: its subdirectories and hard links' later names.
    late: dict[str, list[FileMeta]] = {}
    for entry in layout.late:
        if entry.path not in made_before:
            late.setdefault(parent_of(entry.path), []).append(entry)
    # Shallowest first, so every parent exists before its children.
    dirs = shallowest_first(layout.dirs)
    for path in dirs:
        if any(entry.kind == "dir" for entry in late.get(path, ())):
            with open_dir(root_fd, path) as dir_fd:
                for entry in late[path]:
                    if entry.kind == "dir":
                        _create(entry, dir_fd, job.blobs)
    # Every directory exists: the files and links of each are the executor's, in batches of directories;
    # each batch reads its entries back once it has made them all, so what follows checks only the
    # directories and the hard links' other names (nothing after a batch touches its entries' own values).
    create(job, without(layout.items, made_before) if made_before else layout.items)
    # The other names of each hard link, once every first name exists (it may sort deeper).
    for entry in layout.late:
        if entry.hardlink is not None:
            _link(root_fd, entry)
    # Directory times last, deepest first: creating a child would move its parent's mtime.
    for path in deepest_first(dirs):
        if path in layout.unsealed:
            continue
        with open_dir(root_fd, path) as dir_fd:
            verify_children(late.get(path, ()), dir_fd)
            entry = layout.dirs[path]
            apply_fd(dir_fd, entry, path)
            with naming(path):  # os.utime(fd) names the fd's number
                named("utime", os.utime, dir_fd, ns=(entry.atime_ns, entry.mtime_ns))
                verify_entries([(entry, named("fstat", os.fstat, dir_fd))])


def without(items: Sequence[CreateItem], made: frozenset[str]) -> list[CreateItem]:
    """``items`` less the entries an earlier part made (a first name listed for its later names' sake): only the
    runs of the directories those lie in are looked into."""
    parents = {parent_of(path) for path in made}
    kept: list[CreateItem] = []
    for path, run in items:
        if path not in parents:
            kept.append((path, run))
            continue
        start = 0
        for at, entry in enumerate(run):
            if entry.path in made:
                if at > start:
                    kept.append((path, run.part(start, at)))
                start = at + 1
        if start < len(run):
            kept.append((path, run.part(start, len(run))))
    return kept


@contextlib.contextmanager
def open_dir(root_fd: int, path: str) -> Iterator[int]:
    if path == ROOT:
        yield root_fd
        return
    fd = named("open", open_beneath, root_fd, path, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _create(entry: FileMeta, dir_fd: int, blob_path: BlobSource) -> None:
    name = entry.path.rpartition("/")[2]
    kind = entry.kind
    if kind == "file":  # first: nearly every entry is one
        out = named("open", os.open, name, _NEW_FILE, 0o600, dir_fd=dir_fd)
        try:
            _copy_blob(entry, blob_path, out)
            apply_fd(out, entry, entry.path)  # after the writes: a write clears setuid for non-root
            with naming(entry.path):  # os.utime(fd) names the fd's number
                named("utime", os.utime, out, ns=(entry.atime_ns, entry.mtime_ns))
            # Read back once, with every sibling, by _verify_children before the parent is sealed.
        finally:
            os.close(out)
    elif kind == "dir":
        named("mkdir", os.mkdir, name, 0o700, dir_fd=dir_fd)
    elif kind != "symlink":
        create_special(dir_fd, name, entry)  # a FIFO or a device: made by name, never opened
    else:
        assert entry.target is not None
        named("symlink", os.symlink, entry.target, name, dir_fd=dir_fd)
        apply_symlink(dir_fd, name, entry)
        named("utime", os.utime, name, ns=(entry.atime_ns, entry.mtime_ns), dir_fd=dir_fd, follow_symlinks=False)


def create_items(root_fd: int, batch: Sequence[CreateItem], blobs: BlobSource) -> list[None]:
    """The reference *execute* stage of a download: create every entry of ``batch`` in its directory beneath
    ``root_fd``, then read them back."""
    for path, entries in batch:
        with open_dir(root_fd, path) as dir_fd:
            for entry in entries:
                _create(entry, dir_fd, blobs)
            # Read back once all are made: nothing after this touches these entries' own times, mode or
            # size (linking another name moves only ctime and nlink).
            verify_children(entries, dir_fd)
    return []


def _link(root_fd: int, entry: FileMeta) -> None:
    """Make ``entry`` another name of its first name's inode, through dir fds beneath the staging root."""
    assert entry.hardlink is not None
    with open_dir(root_fd, parent_of(entry.hardlink)) as src_dir, open_dir(root_fd, parent_of(entry.path)) as dst_dir:
        first, name = entry.hardlink.rpartition("/")[2], entry.path.rpartition("/")[2]
        named("link", os.link, first, name, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
        linked = named("lstat", os.lstat, first, dir_fd=src_dir), named("lstat", os.lstat, name, dir_fd=dst_dir)
        if linked[0].st_ino != linked[1].st_ino:
            raise UnsafePathError(f"download refused: {entry.path!r} is not the inode of {entry.hardlink!r} "
                                  "after linking it", path=entry.path)


def _copy_blob(entry: FileMeta, blob_path: BlobSource, out: int) -> None:
    """Copy a blob into ``out`` (open for reading too) and prove it holds the content the manifest names."""
    wanted, size = entry.sha256, entry.size
    assert wanted is not None
    blob, st = blob_path.open(wanted, path=entry.path)  # with its fstat: kind and size before a byte is read
    try:
        if st.st_size != size or not stat.S_ISREG(st.st_mode):
            check_blob_fd(blob, wanted, size, where=f"for {entry.path!r}", path=entry.path)
        if entry.extents is not None:
            # Holes stay holes: only the data runs are copied, the digest covers the logical bytes.
            sha, count = named("copy_file_range", copy_sparse, blob, out, size, entry.extents)
        elif size <= IN_MEMORY_LIMIT:
            data = named("pread", read_small, blob, size)
            sha, count = hashlib.sha256(data).hexdigest(), len(data)
            if sha == wanted:  # never write bytes that are not the named content
                named("write", write_all, out, data)
        elif (runs := named("lseek", data_extents, blob, size)) is None:
            # The digest is of the bytes written to ``out``, read back: what lands is what is proven.
            sha, count = named("copy_file_range", hash_while_copying, blob, out, size)
        else:
            # A blob with holes under an entry that records none (planted for free by a writer of the store, or
            # a store copied with ``rsync -S``) stays sparse: no more is written than the blob holds.
            if len(runs) > MAX_EXTENTS:
                raise too_many_blob_runs(wanted, entry.path)
            sha, count = named("copy_file_range", copy_sparse, blob, out, size, runs)
    finally:
        os.close(blob)
    if sha != wanted or count != size:
        raise IntegrityError(
            f"blob {wanted} for {entry.path!r} is corrupt: {count} bytes hashing to {sha}, manifest says {size} bytes",
            path=entry.path, blob=wanted, actual=sha, failed=IntegrityFailure.CORRUPT)


def too_many_blob_runs(sha: str, path: str) -> IntegrityError:
    """The blob ``sha`` of ``path``, recorded dense, has more data runs than a manifest may list for one file."""
    return IntegrityError(
        f"blob {sha} for {path!r} has holes between more than {MAX_EXTENTS} data runs, which no file a manifest "
        "records can have: refused rather than written with its holes filled", path=path, blob=sha,
        failed=IntegrityFailure.CORRUPT)


def verify_entries(pairs: Iterable[tuple[FileMeta, os.stat_result]]) -> None:
    """Exact equality of kind, mode, size and both times for every pair (stage ``download``)."""
    verify_stored(pairs, stage="download")


def verify_children(entries: Iterable[FileMeta], dir_fd: int) -> None:
    """Re-``lstat`` every child (before its parent's mode may forbid it) and compare exactly."""
    verify_entries([(entry, named("lstat", os.lstat, entry.path.rpartition("/")[2], dir_fd=dir_fd))
                    for entry in entries])



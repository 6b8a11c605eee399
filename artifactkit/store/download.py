"""Materialize manifest entries with exact metadata into a destination, or leave nothing.

Everything is created under a private staging directory next to ``dest`` through directory fds
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, ``O_EXCL | O_NOFOLLOW``), so neither
a forged manifest path nor a symlink planted mid-download can make a write land outside it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

from artifactkit._syscalls import open_beneath, rename_noreplace
from artifactkit.errors import IntegrityError, IntegrityFailure, UnsafePathError
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import deepest_first, shallowest_first, verify_stored
from artifactkit.store.blobs import BlobSource
from artifactkit.store.content import (
    IN_MEMORY_LIMIT,
    check_blob_fd,
    copy_sparse,
    hash_while_copying,
    read_small,
    write_all,
)
from artifactkit.store.executor import CreateItem, CreateJob, Executor
from artifactkit.store.paths import check_tree_shape, parent_of
from artifactkit.store.private_dir import PrivateDir
from artifactkit.store.progress import Reporter
from artifactkit.store.restore_meta import Owners, apply_fd, apply_symlink, create_special, plan

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def restore_tree(entries: Iterable[FileMeta], dest: str, *, blob_path: Callable[[str], str],
                 shape_checked: bool = False, owners: Owners = "exact", executor: Executor | None = None,
                 progress: Reporter | None = None) -> None:
    """Restore ``entries`` at ``dest`` (absent): directories, then files and links, then hard links, then
    directory times in post-order, every entry read back and compared exactly before the tree is renamed
    into place.

    ``shape_checked`` skips re-validating paths that :func:`parse_manifest` already validated.
    ``owners`` is the policy of :func:`artifactkit.store.restore_meta.plan` (checked before anything
    is written). The files are created by ``executor`` (the *execute* stage; ``None``: in this process, by
    :func:`create_items` itself), which gets them in batches of whole directories; ``progress`` is told as
    they finish.
    """
    checked = {e.path: e for e in entries} if shape_checked else check_tree_shape(entries, where="manifest")
    by_path = plan(checked.values(), owners)
    parent, name = os.path.split(dest)
    # Whoever can write DEST's parent can rename a directory there away and put a link or a directory of
    # theirs in its place; nobody else can change what is *inside* ours (0700). So the tree is built inside
    # it, reached from its fd, and renamed out of it through that fd: what lands at DEST is always the
    # tree verified here, never something swapped in by name. Held (flocked) until the end: a later
    # download to the same name removes only unlocked private dirs.
    private = PrivateDir(parent, _staging_prefix(name))
    try:
        os.mkdir(_TREE, 0o700, dir_fd=private.fd)
        source = blob_path if isinstance(blob_path, BlobSource) else BlobSource("", opener=blob_path)
        _materialize(by_path, private, source, executor, progress or Reporter(None))
        # Every entry, the root included, was verified exact above; the rename moves no time.
        _rename_into_place(private.fd, private.parent_fd, name, dest)
    finally:
        private.close()


#: The tree's name inside a download's private directory; only what this process made is ever inside.
_TREE: Final = "tree"


def _staging_prefix(name: str) -> str:
    """``.NAME.artifactkit-``; a name too long to extend within 255 bytes is replaced by its digest."""
    if len(os.fsencode(name)) > 200:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:40]
    return f".{name}.artifactkit-"


def _materialize(by_path: dict[str, FileMeta], private: PrivateDir, blobs: BlobSource,
                 executor: Executor | None, progress: Reporter) -> None:
    made = [e for e in by_path.values() if e.kind != "dir" and e.hardlink is None]
    progress.phase("create", entries_total=len(made), bytes_total=sum(e.size for e in made if e.kind == "file"))
    try:
        root_fd = os.open(_TREE, _DIR_FLAGS | os.O_CLOEXEC, dir_fd=private.fd)
        try:
            job = CreateJob(root_fd, blobs, on_batch=progress.advance)
            _materialize_unguarded(by_path, job, executor)
        finally:
            os.close(root_fd)
    except OSError as err:
        # Only we write in the private staging dir: a link or entry found there was planted.
        if err.errno not in (errno.ELOOP, errno.EXDEV, errno.EEXIST, errno.ENOTDIR):
            raise
        raise UnsafePathError(
            f"download refused: {err.filename!r} in the staging directory {private.where!r} was replaced by a "
            f"symlink or another entry while restoring ({err.strerror}); nothing was written outside it",
            path=str(err.filename)) from err


def _materialize_unguarded(by_path: dict[str, FileMeta], job: CreateJob, executor: Executor | None) -> None:
    root_fd = job.root_fd
    children: dict[str, list[FileMeta]] = {}
    for path, entry in by_path.items():
        if path != ROOT:
            children.setdefault(parent_of(path), []).append(entry)
    # Shallowest first, so every parent exists before its children.
    dirs = shallowest_first(p for p, e in by_path.items() if e.kind == "dir")
    for path in dirs:
        with _dir_fd(root_fd, path) as dir_fd:
            for entry in children.get(path, ()):
                if entry.kind == "dir":
                    _create(entry, dir_fd, job.blobs)
    # Every directory exists: the files and links of each are the executor's, in batches of directories;
    # each batch reads its entries back once it has made them all, so what follows checks only the
    # directories and the hard links' other names (nothing after a batch touches its entries' own values).
    items: list[CreateItem] = [
        (path, todo) for path in dirs
        if (todo := [e for e in children.get(path, ()) if e.kind != "dir" and e.hardlink is None])]
    if executor is None:
        create_items(root_fd, items, job.blobs)
        job.on_batch(sum(len(entries) for _, entries in items),
                     sum(e.size for _, entries in items for e in entries if e.kind == "file"))
    else:
        executor.create(job, items)
    # The other names of each hard link, once every first name exists (it may sort deeper).
    for entry in by_path.values():
        if entry.hardlink is not None:
            _link(root_fd, entry)
    # Directory times last, deepest first: creating a child would move its parent's mtime.
    for path in deepest_first(dirs):
        with _dir_fd(root_fd, path) as dir_fd:
            _verify_children([e for e in children.get(path, ()) if e.kind == "dir" or e.hardlink is not None],
                             dir_fd)
            entry = by_path[path]
            apply_fd(dir_fd, entry, path)
            os.utime(dir_fd, ns=(entry.atime_ns, entry.mtime_ns))
            verify_entries([(entry, os.fstat(dir_fd))])


@contextlib.contextmanager
def _dir_fd(root_fd: int, path: str) -> Iterator[int]:
    if path == ROOT:
        yield root_fd
        return
    fd = open_beneath(root_fd, path, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _create(entry: FileMeta, dir_fd: int, blob_path: BlobSource) -> None:
    name = entry.path.rpartition("/")[2]
    kind = entry.kind
    if kind == "file":  # first: nearly every entry is one
        out = os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)
        try:
            _copy_blob(entry, blob_path, out)
            apply_fd(out, entry, entry.path)  # after the writes: a write clears setuid for non-root
            os.utime(out, ns=(entry.atime_ns, entry.mtime_ns))
            # Read back once, with every sibling, by _verify_children before the parent is sealed.
        finally:
            os.close(out)
    elif kind == "dir":
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    elif kind != "symlink":
        create_special(dir_fd, name, entry)  # a FIFO or a device: made by name, never opened
    else:
        assert entry.target is not None
        os.symlink(entry.target, name, dir_fd=dir_fd)
        apply_symlink(dir_fd, name, entry)
        os.utime(name, ns=(entry.atime_ns, entry.mtime_ns), dir_fd=dir_fd, follow_symlinks=False)


def create_items(root_fd: int, batch: Sequence[CreateItem], blobs: BlobSource) -> list[None]:
    """The reference *execute* stage of a download: create every entry of ``batch`` in its directory beneath
    ``root_fd``, then read them back."""
    for path, entries in batch:
        with _dir_fd(root_fd, path) as dir_fd:
            for entry in entries:
                _create(entry, dir_fd, blobs)
            # Read back once all are made: nothing after this touches these entries' own times, mode or
            # size (linking another name moves only ctime and nlink).
            _verify_children(entries, dir_fd)
    return []


def _link(root_fd: int, entry: FileMeta) -> None:
    """Make ``entry`` another name of its first name's inode, through dir fds beneath the staging root."""
    assert entry.hardlink is not None
    with _dir_fd(root_fd, parent_of(entry.hardlink)) as src_dir, _dir_fd(root_fd, parent_of(entry.path)) as dst_dir:
        first, name = entry.hardlink.rpartition("/")[2], entry.path.rpartition("/")[2]
        os.link(first, name, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
        if os.lstat(first, dir_fd=src_dir).st_ino != os.lstat(name, dir_fd=dst_dir).st_ino:
            raise UnsafePathError(f"download refused: {entry.path!r} is not the inode of {entry.hardlink!r} "
                                  "after linking it", path=entry.path)


def _copy_blob(entry: FileMeta, blob_path: BlobSource, out: int) -> None:
    """Copy a blob into ``out`` (open for reading too) and prove it holds the content the manifest names."""
    named, size = entry.sha256, entry.size
    assert named is not None
    blob = blob_path.open(named, path=entry.path)
    try:
        st = os.fstat(blob)  # kind and size before a byte is read; the message only when it is wrong
        if st.st_size != size or not stat.S_ISREG(st.st_mode):
            check_blob_fd(blob, named, size, where=f"for {entry.path!r}", path=entry.path)
        if entry.extents is not None:
            # Holes stay holes: only the data runs are copied, the digest covers the logical bytes.
            sha, count = copy_sparse(blob, out, size, entry.extents)
        elif size <= IN_MEMORY_LIMIT:
            data = read_small(blob, size)
            sha, count = hashlib.sha256(data).hexdigest(), len(data)
            if sha == named:  # never write bytes that are not the named content
                write_all(out, data)
        else:
            # The digest is of the bytes written to ``out``, read back: what lands is what is proven.
            sha, count = hash_while_copying(blob, out, size)
    finally:
        os.close(blob)
    if sha != named or count != size:
        raise IntegrityError(
            f"blob {named} for {entry.path!r} is corrupt: {count} bytes hashing to {sha}, manifest says {size} bytes",
            path=entry.path, blob=named, actual=sha, failed=IntegrityFailure.CORRUPT)


def verify_entries(pairs: Iterable[tuple[FileMeta, os.stat_result]]) -> None:
    """Exact equality of kind, mode, size and both times for every pair (stage ``download``)."""
    verify_stored(pairs, stage="download")


def _verify_children(entries: Iterable[FileMeta], dir_fd: int) -> None:
    """Re-``lstat`` every child (before its parent's mode may forbid it) and compare exactly."""
    verify_entries([(entry, os.lstat(entry.path.rpartition("/")[2], dir_fd=dir_fd)) for entry in entries])


def _rename_into_place(private_fd: int, parent_fd: int, name: str, dest: str) -> None:
    try:
        rename_noreplace(_TREE, name, src_dir_fd=private_fd, dst_dir_fd=parent_fd)
    except FileExistsError as err:
        raise FileExistsError(errno.EEXIST, "download destination appeared during the download", dest) from err
    except OSError as err:
        if err.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
        # No RENAME_NOREPLACE here (old kernel or filesystem): a checked plain rename instead.
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "download destination already exists", dest) from err
        os.rename(_TREE, name, src_dir_fd=private_fd, dst_dir_fd=parent_fd)



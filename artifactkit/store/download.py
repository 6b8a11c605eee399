"""Materialize manifest entries with exact metadata into a destination, or leave nothing.

Everything is created under a private staging directory next to ``dest`` through directory fds
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, ``O_EXCL | O_NOFOLLOW``), so neither
a forged manifest path nor a symlink planted mid-download can make a write land outside it.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

import attrs

from artifactkit._fsutil import naming
from artifactkit._syscalls import open_beneath, rename_noreplace
from artifactkit.engine.protocol import CreateItem, CreateJob, Executor, covered
from artifactkit.engine.reference.restore_meta import Owners, apply_fd, apply_symlink, create_special, plan
from artifactkit.errors import IntegrityError, IntegrityFailure, UnsafePathError
from artifactkit.metadata.extended import data_extents
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import deepest_first, shallowest_first, verify_stored
from artifactkit.store.blobs import BlobsNeeded, BlobSource
from artifactkit.store.content import (
    IN_MEMORY_LIMIT,
    check_blob_fd,
    copy_sparse,
    hash_while_copying,
    read_small,
    write_all,
)
from artifactkit.store.manifest_limits import MAX_EXTENTS
from artifactkit.store.paths import check_tree_shape, parent_of
from artifactkit.store.private_dir import PrivateDir
from artifactkit.store.progress import Reporter

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def restore_tree(entries: Iterable[FileMeta], dest: str, *, blob_path: Callable[[str], str],
                 shape_checked: bool = False, owners: Owners = "exact", executor: Executor | None = None,
                 progress: Reporter | None = None) -> None:
    """Restore ``entries`` at ``dest`` (absent): directories, then files and links, then hard links, then
    directory times in post-order, every entry read back and compared exactly before the tree is renamed
    into place.

    ``shape_checked`` skips re-validating paths that :func:`parse_manifest` already validated.
    ``owners`` is the policy of :func:`artifactkit.engine.reference.restore_meta.plan` (checked before anything
    is written). The files are created by ``executor`` (the *execute* stage; ``None``: in this process, by
    :func:`create_items` itself), which gets them in batches of whole directories; ``progress`` is told as
    they finish. ``entries`` may be :class:`Prepared` (the native core's parse of the manifest), which lays
    out its own restore where its plan changes nothing.
    """
    layout = entries.layout(owners) if isinstance(entries, Prepared) else None
    if layout is None:
        checked = {e.path: e for e in entries} if shape_checked else check_tree_shape(entries, where="manifest")
        layout = lay_out(plan(checked.values(), owners).values())
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
        _materialize(layout, private, source, executor, progress or Reporter(None))
        # Every entry, the root included, was verified exact above; the rename moves no time.
        _rename_into_place(private.fd, private.parent_fd, name, dest)
    finally:
        private.close()


@attrs.frozen
class Layout:
    """A planned tree as its restore makes it: the directories (by path), what is created in each (the
    executor's items, directories shallowest first), and what is read back once all of it exists — every
    directory but the root and every later name of a hard link, in manifest order."""

    dirs: dict[str, FileMeta]
    items: list[CreateItem]
    late: list[FileMeta]


def lay_out(planned: Iterable[FileMeta]) -> Layout:
    """The :class:`Layout` of planned entries (a shape-checked tree), in one pass over them."""
    dirs: dict[str, FileMeta] = {}
    made: dict[str, list[FileMeta]] = {}
    late: list[FileMeta] = []
    for entry in planned:
        if entry.kind == "dir":
            dirs[entry.path] = entry
            if entry.path != ROOT:
                late.append(entry)
        elif entry.hardlink is not None:
            late.append(entry)
        else:
            made.setdefault(parent_of(entry.path), []).append(entry)
    return Layout(dirs, [(path, made[path]) for path in shallowest_first(dirs) if path in made], late)


class Prepared(Sequence[FileMeta], abc.ABC):
    """A manifest's entries held in another form (the native core's parse), each ``FileMeta`` made when it is
    asked for: it lays out its own restore and names its blobs without making them all. Its tree's shape is
    checked (by the parse that made it, as :func:`parse_manifest`'s)."""

    @abc.abstractmethod
    def layout(self, owners: Owners) -> Layout | None:
        """The restore's :class:`Layout` under ``owners`` where :func:`plan` changes and refuses no entry;
        ``None`` otherwise (then every entry is planned here, and the plan's error or warning names them all)."""

    @abc.abstractmethod
    def blobs(self) -> BlobsNeeded:
        """As :func:`blobs_needed`."""


def blobs_needed(entries: Sequence[FileMeta]) -> BlobsNeeded:
    """The blobs a download of ``entries`` reads: ``{sha256: size}`` of every regular file."""
    if isinstance(entries, Prepared):
        return entries.blobs()
    return BlobsNeeded.of({entry.sha256: entry.size for entry in entries
                           if entry.kind == "file" and entry.sha256 is not None})


#: The tree's name inside a download's private directory; only what this process made is ever inside.
_TREE: Final = "tree"


def _staging_prefix(name: str) -> str:
    """``.NAME.artifactkit-``; a name too long to extend within 255 bytes is replaced by its digest."""
    if len(os.fsencode(name)) > 200:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:40]
    return f".{name}.artifactkit-"


def _materialize(layout: Layout, private: PrivateDir, blobs: BlobSource, executor: Executor | None,
                 progress: Reporter) -> None:
    entries_total, bytes_total = covered(layout.items)
    progress.phase("create", entries_total=entries_total, bytes_total=bytes_total)
    try:
        root_fd = os.open(_TREE, _DIR_FLAGS | os.O_CLOEXEC, dir_fd=private.fd)
        try:
            job = CreateJob(root_fd, blobs, on_batch=progress.advance)
            _materialize_unguarded(layout, job, executor)
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


def _materialize_unguarded(layout: Layout, job: CreateJob, executor: Executor | None) -> None:
    root_fd = job.root_fd
    # What each directory holds that is read back at the end: its subdirectories and hard links' later names.
    late: dict[str, list[FileMeta]] = {}
    for entry in layout.late:
        late.setdefault(parent_of(entry.path), []).append(entry)
    # Shallowest first, so every parent exists before its children.
    dirs = shallowest_first(layout.dirs)
    for path in dirs:
        if any(entry.kind == "dir" for entry in late.get(path, ())):
            with _dir_fd(root_fd, path) as dir_fd:
                for entry in late[path]:
                    if entry.kind == "dir":
                        _create(entry, dir_fd, job.blobs)
    # Every directory exists: the files and links of each are the executor's, in batches of directories;
    # each batch reads its entries back once it has made them all, so what follows checks only the
    # directories and the hard links' other names (nothing after a batch touches its entries' own values).
    if executor is None:
        create_items(root_fd, layout.items, job.blobs)
        job.on_batch(*covered(layout.items))
    else:
        executor.create(job, layout.items)
    # The other names of each hard link, once every first name exists (it may sort deeper).
    for entry in layout.late:
        if entry.hardlink is not None:
            _link(root_fd, entry)
    # Directory times last, deepest first: creating a child would move its parent's mtime.
    for path in deepest_first(dirs):
        with _dir_fd(root_fd, path) as dir_fd:
            _verify_children(late.get(path, ()), dir_fd)
            entry = layout.dirs[path]
            apply_fd(dir_fd, entry, path)
            with naming(path):  # os.utime(fd) names the fd's number
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
            with naming(entry.path):  # os.utime(fd) names the fd's number
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
    blob, st = blob_path.open(named, path=entry.path)  # with its fstat: kind and size before a byte is read
    try:
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
        elif (runs := data_extents(blob, size)) is None:
            # The digest is of the bytes written to ``out``, read back: what lands is what is proven.
            sha, count = hash_while_copying(blob, out, size)
        else:
            # A blob with holes under an entry that records none (planted for free by a writer of the store, or
            # a store copied with ``rsync -S``) stays sparse: no more is written than the blob holds.
            if len(runs) > MAX_EXTENTS:
                raise too_many_blob_runs(named, entry.path)
            sha, count = copy_sparse(blob, out, size, runs)
    finally:
        os.close(blob)
    if sha != named or count != size:
        raise IntegrityError(
            f"blob {named} for {entry.path!r} is corrupt: {count} bytes hashing to {sha}, manifest says {size} bytes",
            path=entry.path, blob=named, actual=sha, failed=IntegrityFailure.CORRUPT)


def too_many_blob_runs(sha: str, path: str) -> IntegrityError:
    """The blob ``sha`` of ``path``, recorded dense, has more data runs than a manifest may list for one file."""
    return IntegrityError(
        f"blob {sha} for {path!r} has holes between more than {MAX_EXTENTS} data runs, which no file a manifest "
        "records can have: refused rather than written with its holes filled", path=path, blob=sha,
        failed=IntegrityFailure.CORRUPT)


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



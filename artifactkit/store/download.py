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
import time
from collections.abc import Callable
from typing import Final

from artifactkit._mounts import PAST_ATTRIBUTE_CACHE_S, may_cache_attributes, mount_info
from artifactkit._syscalls import rename_noreplace
from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.protocol import CreateJob, Engine
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import Owners, Parsed, covered
from artifactkit.errors import UnsafePathError
from artifactkit.store import fresh_looks
from artifactkit.store.private_dir import PrivateDir
from artifactkit.store.progress import Reporter

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def restore_tree(entries: Parsed, dest: str, *, blob_path: Callable[[str], str], owners: Owners = "exact",
                 engine: Engine | None = None, progress: Reporter | None = None) -> tuple[str, ...]:
    """Restore ``entries`` at ``dest`` (absent): directories, then files and links, then hard links, then
    directory times in post-order, every entry read back and compared exactly before the tree is renamed
    into place.

    ``entries``: an engine's parse (:meth:`~artifactkit.engine.protocol.Engine.parse`), which lays out its own
    restore under ``owners``, the policy of :func:`~artifactkit.engine.reference.restore_meta.plan` (checked
    before anything is written). The tree is made by ``engine`` (``None``: the one selected now), which gets
    the files in batches of whole directories; ``progress`` is told as they finish.

    Returns the fields it could not verify: on a filesystem whose client may cache attributes, the times where
    no look past the cache could be shown fresh (:mod:`~artifactkit.store.fresh_looks`); else ``()``.
    """
    layout = entries.layout(owners)
    source = blob_path if isinstance(blob_path, BlobSource) else BlobSource("", opener=blob_path)

    def fill(root_fd: int, engine: Engine, reporter: Reporter) -> None:
        entries_total, bytes_total = covered(layout.items)
        reporter.phase("create", entries_total=entries_total, bytes_total=bytes_total)
        engine.create(CreateJob(root_fd, source, on_batch=reporter.advance), layout)
    return build_in_place(dest, fill, engine=engine, progress=progress, entries=entries)


#: Makes a tree beneath the fd it is given, with the engine and reporter it is given.
Filler = Callable[[int, Engine, Reporter], None]


def build_in_place(dest: str, fill: Filler, *, engine: Engine | None, progress: Reporter | None,
                   entries: Parsed | None) -> tuple[str, ...]:
    """Make a tree by ``fill`` in a private directory beside ``dest``, then rename it into place: what
    :func:`restore_tree` does with its entries, and a download in parts with each part's
    (:mod:`~artifactkit.store.download_parts`). ``entries``: every entry of the tree, to read the times back
    past a client's cache (``None``: the caller has chosen a filesystem that keeps none)."""
    parent, name = os.path.split(dest)
    # Whoever can write DEST's parent can rename a directory there away and put a link or a directory of
    # theirs in its place; nobody else can change what is *inside* ours (0700). So the tree is built inside
    # it, reached from its fd, and renamed out of it through that fd: what lands at DEST is always the
    # tree verified here, never something swapped in by name. Held (flocked) until the end: a later
    # download to the same name removes only unlocked private dirs.
    private = PrivateDir(parent, _staging_prefix(name))
    try:
        os.mkdir(_TREE, 0o700, dir_fd=private.fd)
        with contextlib.ExitStack() as stack:
            if engine is None:
                engine = stack.enter_context(contextlib.closing(engine_for(None, "download")))
            _materialize(fill, private, engine, progress or Reporter(None))
        tree = _TREE
        unverified: tuple[str, ...] = ()
        if may_cache(parent) and entries is None:
            # A download in parts is chosen only where no cache is; should the mount have changed since, its times
            # are named unverified rather than said exact.
            unverified = fresh_looks.CACHED
        elif may_cache(parent) and entries is not None:
            # weed mount keeps no atime: for a second its cache showed the value set, and the read-back inside
            # that second said "verified exact". The calibration is made while the kernel's timeout runs out.
            calibrated = fresh_looks.prepare(private.fd)
            time.sleep(PAST_ATTRIBUTE_CACHE_S)
            tree, unverified = fresh_looks.read_back(entries, private.fd, _TREE, calibrated=calibrated)
        # Every entry, the root included, was verified above; the rename moves no time.
        _rename_into_place(tree, private.fd, private.parent_fd, name, dest)
    finally:
        private.close()
    return unverified


#: The tree's name inside a download's private directory; only what this process made is ever inside.
_TREE: Final = "tree"


def _staging_prefix(name: str) -> str:
    """``.NAME.artifactkit-``; a name too long to extend within 255 bytes is replaced by its digest."""
    if len(os.fsencode(name)) > 200:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:40]
    return f".{name}.artifactkit-"


def _materialize(fill: Filler, private: PrivateDir, engine: Engine, progress: Reporter) -> None:
    try:
        root_fd = os.open(_TREE, _DIR_FLAGS | os.O_CLOEXEC, dir_fd=private.fd)
        try:
            fill(root_fd, engine, progress)
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


def may_cache(parent: str) -> bool:
    """Whether ``parent``'s filesystem may answer ``stat`` from a client cache (unknown without /proc: no)."""
    try:
        return may_cache_attributes(mount_info(parent or ".").fs_type)
    except OSError:
        return False


def _rename_into_place(tree: str, private_fd: int, parent_fd: int, name: str, dest: str) -> None:
    try:
        rename_noreplace(tree, name, src_dir_fd=private_fd, dst_dir_fd=parent_fd)
    except FileExistsError as err:
        raise FileExistsError(errno.EEXIST, "download destination appeared during the download", dest) from err
    except OSError as err:
        if err.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
        # No RENAME_NOREPLACE here (old kernel or filesystem): a checked plain rename instead.
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "download destination already exists", dest) from err
        os.rename(tree, name, src_dir_fd=private_fd, dst_dir_fd=parent_fd)



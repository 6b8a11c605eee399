"""The native core's batch functions (:mod:`artifactkit._native`) with the reference engine's errors.

The core reports a failure as data — ``NativeFailure(kind, position, fields)`` — and this module raises
what the reference engine (:func:`~artifactkit.store.stage.stage_file`,
:func:`~artifactkit.store.download.create_items`) raises in the same case: the same class, message,
fields and ``errno``, built by the same Python functions wherever one exists (``_changed``, ``_read_back``,
``verify_entries``), so a message is written once. Importing this module fails with ``ImportError`` where
the core is not built.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from artifactkit import _native
from artifactkit.errors import IntegrityError, IntegrityFailure, NotRestorableError, SourceChangedError
from artifactkit.metadata.flags import COMPARED_FLAGS, RESTORABLE_FLAGS, _translate, flag_letters
from artifactkit.metadata.model import SPECIAL_KINDS, FileMeta
from artifactkit.store._native_staged import KeptReads, StagedMoves
from artifactkit.store._native_tree import CoreRun
from artifactkit.store.blobs import BlobSource
from artifactkit.store.content import IN_MEMORY_LIMIT, _changed, not_regular
from artifactkit.store.download import _dir_fd, _verify_children, too_many_blob_runs, verify_entries
from artifactkit.store.executor import CreateItem
from artifactkit.store.restore_meta import _read_back, create_special
from artifactkit.store.stage import Staged, StageItem

if TYPE_CHECKING:
    from artifactkit.store._native_capture import CapturedReads

# The core hard-codes what the reference imports: a core whose constants drifted is not this engine.
if (int(RESTORABLE_FLAGS), int(COMPARED_FLAGS), IN_MEMORY_LIMIT) != (
        _native.RESTORABLE_FLAGS, _native.COMPARED_FLAGS, _native.IN_MEMORY_LIMIT):
    raise ImportError("artifactkit._native was built with other flag masks or limits than this package")

#: A file to read as the core takes it: only what the read checks (path, size, mtime_ns, ctime_ns, identity).
WireItem = tuple[int, str, int, int, int | None, int, int]
#: A file or link to create as the core takes it (``native/src/py/create_files.rs`` reads these 14 fields in this
#: order).
WireEntry = tuple[Any, ...]
_WHEN = ("between capture and read", "while being read")


def item_to_wire(item: StageItem) -> WireItem:
    """What the core's read needs of an item, as a plain tuple (PyO3 converts it without attribute look-ups)."""
    index, entry, (dev, ino) = item
    return index, entry.path, entry.size, entry.mtime_ns, entry.ctime_ns, dev, ino


def entry_to_wire(entry: FileMeta) -> WireEntry:
    """What creating ``entry`` needs, as a plain tuple (ctime, hard link and link count are not: a created
    entry sets none of them)."""
    return (entry.path, entry.kind, entry.mode, entry.mtime_ns, entry.atime_ns, entry.size, entry.sha256,
            entry.target, entry.uid, entry.gid, entry.xattrs, entry.extents, entry.flags, entry.rdev)


def stage_files(root: str, txn_fd: int, blobs_fd: int, items: Sequence[StageItem], threads: int, *,
                state: _native.StageState | None = None) -> list[Staged]:
    """:func:`~artifactkit.store.stage.stage_file` for every item on ``threads`` threads, GIL released: the
    same :class:`Staged` values in the same order (``has_blob``: a regular file of that size in ``blobs_fd``,
    asked only of names in the state's listing where it has one; content staged earlier in this call or an
    earlier one with this ``state``, the publish's, is staged once)."""
    state = _native.StageState() if state is None else state
    try:
        found = _native.stage_files(root, txn_fd, blobs_fd, [item_to_wire(item) for item in items], threads, state)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        _raise_stage(kind, fields, root, items[at])
    # Extents cross as a list; Staged holds them as a tuple (hashable, as the reference's).
    return [Staged(index, sha, noatime, flags, None if runs is None else tuple(runs), staged)
            for index, sha, noatime, flags, runs, staged in found]


def stage_captured(root: str, txn_fd: int, blobs_fd: int, reads: CapturedReads, span: tuple[int, int], *,
                   threads: int, state: _native.StageState,
                   on_progress: Callable[[int, int], None] | None = None) -> KeptReads:
    """:func:`stage_files` of ``reads[start:stop]`` (``span``), the items made by the core from its own capture,
    its results kept in ``state`` (:mod:`~artifactkit.store._native_staged`); ``on_progress(files, bytes)``
    with what was read since its last call, every few hundred files and at the end (what it raises is raised)."""
    start, stop = span
    first = len(state)
    try:
        kept = _native.stage_captured(root, txn_fd, blobs_fd, reads.tree, start, stop, threads, state, on_progress)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        _raise_stage(kind, fields, root, reads[start + at])
    return KeptReads(state, first, first + kept)


def rename_files(moves: Sequence[tuple[str, str]], *, src_dir_fd: int, dst_dir_fd: int) -> None:
    """``os.rename`` of every pair from ``src_dir_fd`` to ``dst_dir_fd`` in order, GIL released (one thread:
    ``native/src/read/renames.rs`` says why); the first failing pair's ``OSError`` as ``os.rename`` raises it (errno,
    both names), the pairs after it not renamed. :class:`~artifactkit.store._native_staged.StagedMoves` go to
    the core as their range, its names made there."""
    try:
        if isinstance(moves, StagedMoves):
            _native.rename_staged(src_dir_fd, dst_dir_fd, moves.state, moves.start, moves.stop)
        else:
            _native.rename_files(src_dir_fd, dst_dir_fd, moves)  # PyO3 takes any sequence: no copy
    except _native.NativeFailure as failure:
        kind, _, fields = failure.args
        _raise_common(kind, fields)


def _raise_stage(kind: str, fields: dict[str, Any], root: str, item: StageItem) -> NoReturn:
    _, entry, identity = item
    path = f"{root}/{entry.path}"
    if kind == "source_symlink":
        cause = OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        raise SourceChangedError(f"source {path!r} changed between capture and read: it was replaced by a "
                                 "symlink; publish again once it is stable", path=path) from cause
    if kind == "source_length":
        raise SourceChangedError(
            f"source {path!r} changed while read: {fields['count']} bytes read, {entry.size} captured", path=path)
    if kind == "source_changed":
        _changed(path, entry, identity, _stat(fields["stat"]), _WHEN[fields["when"]])
        raise SourceChangedError(f"source {path!r} changed {_WHEN[fields['when']]}", path=path)  # pragma: no cover
    _raise_common(kind, fields)


def create_files(root_fd: int, blobs: BlobSource, batch: Sequence[CreateItem], threads: int, *,
                 on_progress: Callable[[int, int], None] | None = None) -> None:
    """:func:`~artifactkit.store.download.create_items` for a batch on ``threads`` threads, GIL released:
    files and symlinks by the core (a :class:`~artifactkit.store._native_tree.CoreRun` from the core's own
    entries, any other as ``entry_to_wire``'s tuples), FIFOs and devices (made by name, never opened) here.
    ``blobs`` must be a directory (its ``dir_fd``, else its path), not another seam's ``opener``.
    ``on_progress(entries, bytes)`` is called as the core finishes each part of the files and symlinks."""
    if blobs.opener is not None:
        raise ValueError("the native core reads blobs from a directory, not through an opener")
    native: list[tuple[str, list[WireEntry] | tuple[int, int, int]]] = []
    made: list[Sequence[FileMeta]] = []  # what each native item holds, for a failure's entry
    special: list[tuple[str, list[FileMeta]]] = []
    tree: _native.ParsedTree | None = None
    for path, entries in batch:
        if isinstance(entries, CoreRun):
            if tree is not None and entries.tree is not tree:
                raise ValueError("a batch holds runs of one parsed tree")
            tree = entries.tree
            native.append((path, entries.ref))
            made.append(entries)
            continue
        files = [e for e in entries if e.kind not in SPECIAL_KINDS]
        if files:
            native.append((path, [entry_to_wire(e) for e in files]))
            made.append(files)
        if len(files) < len(entries):
            special.append((path, [e for e in entries if e.kind in SPECIAL_KINDS]))
    blobs_fd = blobs.dir_fd
    opened = blobs_fd is None
    if blobs_fd is None:
        blobs_fd = os.open(blobs.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _native.create_files(root_fd, blobs_fd, native, threads, tree, on_progress)
    except _native.NativeFailure as failure:
        kind, at, fields = failure.args
        flat = _Positions(made)
        _raise_create(kind, fields, flat[at], flat, blobs)
    finally:
        if opened:
            os.close(blobs_fd)
    for path, entries in special:
        with _dir_fd(root_fd, path) as dir_fd:
            for entry in entries:
                create_special(dir_fd, entry.path.rpartition("/")[2], entry)
            _verify_children(entries, dir_fd)


class _Positions:
    """The entries of a call's items by their position across them (the core's ``at``), each made a ``FileMeta``
    only when asked for: a failure names one or a few of a batch that may hold a whole tree."""

    def __init__(self, made: list[Sequence[FileMeta]]) -> None:
        self.made = made
        self.starts = list(itertools.accumulate((len(entries) for entries in made), initial=0))

    def __getitem__(self, at: int) -> FileMeta:
        item = bisect.bisect_right(self.starts, at) - 1
        return self.made[item][at - self.starts[item]]


def _raise_create(kind: str, fields: dict[str, Any], entry: FileMeta, flat: _Positions,
                  blobs: BlobSource) -> NoReturn:
    where = f"for {entry.path!r}"
    if kind == "blob":
        sha, what = fields["sha"], fields["what"]
        # open_blob names the blob as it opened it: by name under the directory's fd, else by path.
        opened_as = sha if blobs.dir_fd is not None else f"{blobs.directory}/{sha}"
        if what == "missing":
            missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), opened_as)
            raise IntegrityError(f"blob {sha} {where} is missing from the store", path=opened_as, blob=sha,
                                 failed=IntegrityFailure.MISSING) from missing
        if what == "symlink":
            cause = OSError(errno.ELOOP, os.strerror(errno.ELOOP), opened_as)
            raise IntegrityError(f"blob {sha} {where} is a symlink, not stored content", path=opened_as, blob=sha,
                                 failed=IntegrityFailure.CORRUPT) from cause
        if what == "not_regular":
            raise not_regular(sha, where=where, path=entry.path)
        if what == "runs":
            raise too_many_blob_runs(sha, entry.path)
        if what == "size":
            size = fields["actual_size"]
            raise IntegrityError(f"blob {sha} {where} is corrupt: it has {size} bytes, the manifest says {entry.size}",
                                 path=entry.path, blob=sha, actual=f"{size} bytes", failed=IntegrityFailure.CORRUPT)
        actual = fields["actual_sha"]
        raise IntegrityError(
            f"blob {sha} for {entry.path!r} is corrupt: {fields['actual_size']} bytes hashing to {actual}, "
            f"manifest says {entry.size} bytes", path=entry.path, blob=sha, actual=actual,
            failed=IntegrityFailure.CORRUPT)
    if kind == "xattrs":
        cause = OSError(fields["errno"], os.strerror(fields["errno"]))
        raise NotRestorableError(f"download refused: cannot restore the xattrs of {entry.path!r} here "
                                 f"({cause.strerror}); nothing was made visible", entries=[entry.path]) from cause
    if kind == "flags":
        code = fields["errno"]
        status = _translate(OSError(code, os.strerror(code))).status
        assert entry.flags is not None
        letters = flag_letters(entry.flags & COMPARED_FLAGS)
        why = os.strerror(code) if code else "no flags"
        raise NotRestorableError(f"download refused: cannot set inode flag(s) {letters} on {entry.path!r} here "
                                 f"({status}: {why}); nothing was made visible", entries=[entry.path])
    if kind == "read_back":
        xattrs = fields["xattrs"]
        _read_back(entry, xattrs=None if xattrs is None else tuple(sorted(xattrs)), flags=fields["flags"])
    elif kind == "verify":
        verify_entries([(flat[at], _stat(found)) for at, found in fields["wrong"]])
    _raise_common(kind, fields)


def _raise_common(kind: str, fields: dict[str, Any]) -> NoReturn:
    if kind == "os":
        code = fields["errno"]
        if fields.get("filename2") is not None:
            raise OSError(code, os.strerror(code), fields.get("filename"), None, fields["filename2"])
        raise OSError(code, os.strerror(code), fields.get("filename"))
    # A read-back the reference's own check found equal, or a kind this module does not know: a bug.
    raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference engine does not raise")


def _stat(fields: tuple[int | float, ...]) -> os.stat_result:
    """The core's ``lstat``/``fstat`` as the ``os.stat_result`` the reference's checks take."""
    return os.stat_result(fields)


"""The native core's failures as the public errors: the one table from a ``NativeFailure(kind, position,
fields)`` of :mod:`artifactkit._native` to what the reference engine raises in the same case — the same class,
message, fields and ``errno``, built by the reference's own functions wherever one exists, so each message is
written once. One function per call of the core (scan, read, encode, create); an unknown kind is a bug.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.content import not_regular, source_changed
from artifactkit.engine.reference.create import too_many_blob_runs, verify_entries
from artifactkit.engine.reference.restore_meta import (
    flags_not_restorable,
    read_back_mismatch,
    xattrs_not_restorable,
)
from artifactkit.engine.reference.scan import (
    dir_replaced,
    link_changed,
    not_a_directory,
    unsupported,
    vanished,
    xattrs_unreadable,
)
from artifactkit.engine.values import StageItem
from artifactkit.errors import IntegrityError, IntegrityFailure, SourceChangedError
from artifactkit.manifest.extended import too_many_runs
from artifactkit.manifest.paths import check_symlink_target
from artifactkit.metadata.flags import FlagResult
from artifactkit.metadata.model import FileMeta

#: ``DirReplaced``'s ``when``: listing the directory, or reading its links.
_WHILE = ("scanned", "published")
#: ``SourceChanged``'s ``when``.
_WHEN = ("between capture and read", "while being read")


def raise_scan(kind: str, fields: dict[str, Any], root: str) -> NoReturn:
    """A capture's failure (``capture_tree``) as the reference's scan raises it."""
    if kind == "os":
        raise _os_error(fields)
    if kind == "source_xattrs":
        raise xattrs_unreadable(fields["path"], fields["errno"])
    if kind == "scan_root":
        raise not_a_directory(root)
    if kind == "dir_replaced":
        raise dir_replaced(root, fields["rel"], _WHILE[fields["when"]])
    if kind == "vanished":
        raise vanished(root, fields["gone"]) from FileNotFoundError(
            errno.ENOENT, os.strerror(errno.ENOENT), fields["name"])
    if kind == "link_changed":
        raise link_changed(root, fields["path"])
    if kind == "bad_target":
        check_symlink_target(fields["path"], fields["target"], where=f"source {root!r}")
    if kind == "unsupported":
        raise unsupported(root, fields["paths"])
    # A target the reference's own check accepted, or a kind this module does not know: a bug.
    raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference scan does not raise")


def raise_stage(kind: str, fields: dict[str, Any], root: str, item: StageItem) -> NoReturn:
    """A read's failure (``stage_files``) as :func:`~artifactkit.engine.reference.stage.stage_file` raises it."""
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
        when = _WHEN[fields["when"]]
        if changed := source_changed(path, entry, identity, _stat(fields["stat"]), when):
            raise changed
        raise SourceChangedError(f"source {path!r} changed {when}", path=path)  # pragma: no cover
    raise_common(kind, fields)


def raise_encode(kind: str, fields: dict[str, Any], entries: Sequence[FileMeta], at: int) -> NoReturn:
    """An encoding's failure (``manifest_bytes``) at entry ``at`` as the reference's encoder raises it."""
    if kind == "too_many_runs":
        raise too_many_runs(entries[at].path, fields["count"]) from None
    raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference encoder does not raise")


def raise_create(kind: str, fields: dict[str, Any], flat: Callable[[int], FileMeta], at: int,
                 blobs: BlobSource) -> NoReturn:
    """A create's failure (``create_files``) at entry ``at`` of its call (``flat``: the entry at a position) as
    :func:`~artifactkit.engine.reference.create.create_items` raises it."""
    entry = flat(at)
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
        raise xattrs_not_restorable(entry.path, cause) from cause
    if kind == "flags":
        code = fields["errno"]
        assert entry.flags is not None
        raise flags_not_restorable(entry.path, entry.flags, FlagResult.of_error(OSError(code, os.strerror(code))))
    if kind == "read_back":
        xattrs = fields["xattrs"]
        if mismatch := read_back_mismatch(entry, xattrs=None if xattrs is None else tuple(sorted(xattrs)),
                                          flags=fields["flags"]):
            raise mismatch
    elif kind == "verify":
        verify_entries([(flat(wrong), _stat(found)) for wrong, found in fields["wrong"]])
    raise_common(kind, fields)


def raise_common(kind: str, fields: dict[str, Any]) -> NoReturn:
    """A failure every call may report: an ``OSError`` as ``os`` raises it; any other kind is a bug."""
    if kind == "os":
        raise _os_error(fields)
    # A read-back the reference's own check found equal, or a kind this module does not know: a bug.
    raise AssertionError(f"the native core reported {kind} {fields!r}, which the reference engine does not raise")


def _os_error(fields: dict[str, Any]) -> OSError:
    """The ``OSError`` of the core's failed ``call``, worded as :func:`~artifactkit.engine.reference.calls.named`
    words the reference's (a call of ``""`` is none: a path refused before any call)."""
    code, call = fields["errno"], fields.get("call", "")
    strerror = f"{call}: {os.strerror(code)}" if call else os.strerror(code)
    if fields.get("filename2") is not None:
        return OSError(code, strerror, fields.get("filename"), None, fields["filename2"])
    return OSError(code, strerror, fields.get("filename"))


def _stat(fields: tuple[int | float, ...]) -> os.stat_result:
    """The core's ``lstat``/``fstat`` as the ``os.stat_result`` the reference's checks take."""
    return os.stat_result(fields)


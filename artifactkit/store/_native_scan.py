"""The native core's scan (:func:`artifactkit._native.scan_tree`) as a :class:`~artifactkit.store.scan.Walker`,
with the reference's errors.

The core walks the tree as :mod:`~artifactkit.store.scan` does without a stat cache — the same calls on the
same paths in the same order — with the GIL released except for ``on_progress`` after each directory, and
builds the very :class:`~artifactkit.metadata.model.FileMeta` values. A refusal comes back as data
(``NativeFailure(kind, 0, fields)``) and is raised here through the reference's own error functions, so
each message is written once. Importing this module fails with ``ImportError`` where the core is not built.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, NoReturn

from artifactkit import _native
from artifactkit.metadata.model import FileMeta
from artifactkit.store.paths import check_symlink_target
from artifactkit.store.scan import ScannedTree, dir_replaced, link_changed, not_a_directory, unsupported, vanished

#: ``DirReplaced``'s ``when``: listing the directory, or reading its links.
_WHILE = ("scanned", "published")


def walk(root: str, *, read_links: bool, on_progress: Callable[[int], None]) -> ScannedTree:
    """:func:`~artifactkit.store.scan.scan_tree` of ``root`` without a cache, by the core."""
    try:
        usable = b"\x00" not in os.fsencode(root)
    except UnicodeEncodeError:
        usable = False
    if not usable:
        os.lstat(root)  # the reference's first call refuses it: ValueError or UnicodeEncodeError, as there
    try:
        entries, identities, noatime = _native.scan_tree(root, read_links, on_progress, FileMeta)
    except _native.NativeFailure as failure:
        kind, _, fields = failure.args
        _raise(kind, fields, root)
    return ScannedTree(root=root, entries=entries, identities=identities, listed_noatime=noatime)


def _raise(kind: str, fields: dict[str, Any], root: str) -> NoReturn:
    if kind == "os":
        code = fields["errno"]
        raise OSError(code, os.strerror(code), fields.get("filename"))
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

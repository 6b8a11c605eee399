"""The native core's scan as a :class:`~artifactkit.store.scan.Walker`, with the reference's errors: :func:`capture`
(:func:`artifactkit._native.capture_tree`, the native executor's walk) keeps the captured tree in the core;
:func:`walk` (:func:`artifactkit._native.scan_tree`) makes every ``FileMeta`` as it goes.

The core walks the tree as :mod:`~artifactkit.store.scan` does without a stat cache — the same calls on the
same paths, in the same order on one thread (a second captures the next directory ahead or splits a wide
one's names: ``native/src/scan/second_thread.rs``)
— with the GIL released except for ``on_progress`` after each directory; the values it makes are the very
:class:`~artifactkit.metadata.model.FileMeta` values of the reference. A refusal comes back as data
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
from artifactkit.store._native_capture import CapturedEntries, CapturedIdentities
from artifactkit.store.paths import check_symlink_target
from artifactkit.store.scan import ScannedTree, dir_replaced, link_changed, not_a_directory, unsupported, vanished

#: ``DirReplaced``'s ``when``: listing the directory, or reading its links.
_WHILE = ("scanned", "published")


def walk(root: str, *, read_links: bool, on_progress: Callable[[int], None], threads: int = 1,
         split_min: int | None = None) -> ScannedTree:
    """:func:`~artifactkit.store.scan.scan_tree` of ``root`` without a cache, by the core; ``threads`` 2 or more
    adds a second thread, which captures the next directory ahead or, when free, splits the names of a directory
    of ``split_min`` or more (the core's own default when ``None``: tests split smaller ones)."""
    if not _usable(root):
        os.lstat(root)  # the reference's first call refuses it: ValueError or UnicodeEncodeError, as there
    try:
        split = {} if split_min is None else {"split_min": split_min}
        entries, identities, noatime = _native.scan_tree(root, read_links, on_progress, FileMeta, threads, **split)
    except _native.NativeFailure as failure:
        kind, _, fields = failure.args
        _raise(kind, fields, root)
    return ScannedTree(root=root, entries=entries, identities=identities, listed_noatime=noatime)


def capture(root: str, *, read_links: bool, on_progress: Callable[[int], None], threads: int = 1,
            split_min: int | None = None) -> ScannedTree:
    """:func:`walk`'s capture kept in the core: the same walk, each entry's ``FileMeta`` and identity made only
    when asked (:mod:`~artifactkit.store._native_capture`), the GIL taken only for ``on_progress``."""
    if not _usable(root):
        os.lstat(root)  # the reference's first call refuses it, as in walk
    try:
        split = {} if split_min is None else {"split_min": split_min}
        captured = _native.capture_tree(root, read_links, on_progress, threads, **split)
    except _native.NativeFailure as failure:
        kind, _, fields = failure.args
        _raise(kind, fields, root)
    return ScannedTree(root=root, entries=CapturedEntries(captured), identities=CapturedIdentities(captured),
                       listed_noatime=captured.listed_noatime)


def _usable(root: str) -> bool:
    """Whether the core can take ``root`` as a path: bytes without NUL (anything else is refused by the
    reference's first call, ``os.lstat``: ``ValueError`` or ``UnicodeEncodeError``)."""
    try:
        return b"\x00" not in os.fsencode(root)
    except UnicodeEncodeError:
        return False


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

"""What a version needs of the store: every blob its files name and every tree object it stands on, each with the
size recorded for it, handed out as they are read (``verify``'s and ``gc``'s mark), never the version's listing
whole.

A format-3 version is walked an object at a time (:func:`~artifactkit.manifest.tree_stream.tree_objects`: each
verified and checked as a download's walk checks it, the root's counts too), and every entry line is parsed as
format 2 parses an entry (:func:`~artifactkit.manifest.parse.parse_entry`), with the checks that hold for one entry
alone: a file's size limit, a path's length in bytes and its encoding, a link's target. What needs the whole tree at
once (that a hard link's first name exists and agrees with it) is left to the download, which refuses it before
writing anything. A format 1 or 2 manifest is read whole, as ever: the manifest size limit bounds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from artifactkit.errors import IntegrityError
from artifactkit.manifest.artifact_ref import ArtifactRef, check_manifest_digest
from artifactkit.manifest.limits import MAX_PATH_BYTES, check_file_sizes, decode_text, file_size_limit, show
from artifactkit.manifest.parse import parse_entry
from artifactkit.manifest.paths import check_path_max, check_symlink_target
from artifactkit.manifest.tree_format import is_tree_manifest
from artifactkit.manifest.tree_read import parse_root
from artifactkit.manifest.tree_stream import tree_objects
from artifactkit.metadata.model import FileMeta
from artifactkit.store.backend import Opened
from artifactkit.store.manifest_file import check_name, verified_manifest
from artifactkit.store.versions import store_fetch

#: What a tree object's user is called in verify's report (``name@version:(tree object)``).
TREE_OBJECT = "(tree object)"
#: A path of at most this many characters fits :data:`MAX_PATH_BYTES` whatever it holds (4 bytes a character).
_SHORT = MAX_PATH_BYTES // 4


def version_needs(opened: Opened, ref: ArtifactRef) -> Iterator[tuple[str, str, int]]:
    """``(path, digest, size)`` of each file of ``ref`` and ``(TREE_OBJECT, digest, size)`` of each tree object, as
    they are read; an object's own before its entries'. A defect anywhere is the error a download of it raises
    (after some of its needs may have been handed out: the caller then calls the version broken)."""
    body, where = opened.manifest_bytes(ref, check_digest=False)
    if not is_tree_manifest(body):  # its digest is checked as it is parsed
        for entry in verified_manifest(ref, body, where).files():
            assert entry.sha256 is not None
            yield entry.path, entry.sha256, entry.size
        return
    check_manifest_digest(ref, body, where)
    named = f"manifest of {ref}"
    root = parse_root(body, where=named)
    check_name(ref, root.name, where)
    limit = file_size_limit()
    _entry(root.root_line, named, limit)
    for digest, size, lines in tree_objects(root, store_fetch(opened, None), where=named, at_once=opened.concurrency):
        yield TREE_OBJECT, digest, size
        held = f"{named}: tree object {digest}"
        for path, line in lines:
            entry = _entry(line, held, limit)
            if entry.path != path:
                raise IntegrityError(f"{held}: entry {show(entry.path)} is not at its place, {show(path)}", path=held)
            if entry.sha256 is not None:
                yield path, entry.sha256, entry.size


def _entry(line: str, where: str, limit: int) -> FileMeta:
    """One entry line, parsed and checked as far as it can be alone."""
    entry = parse_entry(decode_text(line, where=where), where=where)
    if entry.size:
        check_file_sizes((entry,), limit, where=where)
    if len(entry.path) > _SHORT:
        check_path_max(entry.path, where=where)
    try:
        os.fsencode(entry.path)
    except UnicodeEncodeError as err:
        raise IntegrityError(f"{where}: entry path {show(entry.path)} holds a lone surrogate, which no file name can",
                             path=where) from err
    if entry.kind == "symlink":
        check_symlink_target(entry.path, entry.target, where=where)
    return entry

"""A published tree's format-3 manifest and objects, made from its canonical format-2 text.

Both engines write the same format-2 lines byte for byte (the differential suites hold them to it); making the
objects from those lines, in this one place, gives both engines the same objects by construction.
"""

from __future__ import annotations

import json
import re
from typing import Final

import attrs

from artifactkit.errors import ManifestLimitError
from artifactkit.manifest.limits import MANIFEST_BYTES_SETTING, manifest_size_limit
from artifactkit.manifest.tree_format import (
    PATH_IN_LINE,
    digest_of_object,
    entries_object,
    index_object,
    root_manifest,
    split_parts,
)

_SIZE: Final = re.compile(r'"size": ([0-9]+)')
# Safe as plain substrings of a canonical line: a quote inside a JSON string is always escaped.
_DIR: Final = '"kind": "dir"'
_FILE: Final = '"kind": "file"'
_LATER_NAME: Final = '"hardlink": '


@attrs.frozen
class TreeObjects:
    """A version as format 3 stores it: its manifest (``root``, named by ``digest``) and every object of its tree,
    by digest (each directory's, and a large one's parts and index)."""

    root: bytes
    digest: str
    objects: dict[str, bytes]


def split_manifest(body: bytes) -> TreeObjects:
    """The format-3 manifest and objects of a canonical format-2 manifest ``body`` (as both engines write it)."""
    text = body.decode("ascii")
    rows = text.split("\n")
    # The head is its own line, ending in a comma; then '"entries": [', the entries, ']}' and the final newline.
    head = json.loads(rows[0][:-1] + "}")
    children: dict[str, list[tuple[str, str]]] = {}
    dirs: list[str] = []
    root_line = ""
    files = file_bytes = 0
    for row in rows[2:-2]:
        line = row[:-1] if row.endswith(",") else row
        found = PATH_IN_LINE.search(line)
        if found is None:  # a bug in a writer, never input: the engines wrote these lines
            raise ValueError(f"a manifest line without a path: {line[:200]!r}")
        literal = found.group(1)
        path: str = json.loads(literal)
        if path == ".":
            root_line = line
            continue
        children.setdefault(path.rpartition("/")[0] or ".", []).append((literal, line))
        if _DIR in line:
            dirs.append(path)
        elif _FILE in line:
            files += 1
            if _LATER_NAME not in line and (size := _SIZE.search(line)) is not None:
                file_bytes += int(size.group(1))
    objects: dict[str, bytes] = {}
    digests: dict[str, str] = {}
    limit = manifest_size_limit()
    # Deepest first: a directory's object names its subdirectories' digests.
    for directory in [*sorted(dirs, key=lambda path: -path.count("/")), "."]:
        digests[directory] = _store_directory(directory, children.get(directory, []), digests, objects, limit)
    root = root_manifest(head["name"], head["source_read_noatime"], root_line, digests["."],
                         entries=len(rows) - 4, files=files, file_bytes=file_bytes)
    return TreeObjects(root, digest_of_object(root), objects)


def _store_directory(directory: str, lines: list[tuple[str, str]], digests: dict[str, str],
                     objects: dict[str, bytes], limit: int) -> str:
    """Make ``directory``'s object (or its parts and their index) into ``objects``; return its digest."""
    prefix = "" if directory == "." else f"{directory}/"
    shas: list[str] = []
    for part in split_parts(lines):
        trees = []
        for literal, line in part:
            if _DIR in line:
                path = json.loads(literal)
                if path.startswith(prefix) and path in digests:
                    trees.append((path, digests[path]))
        shas.append(_add(objects, entries_object(directory, [line for _, line in part], trees), directory, limit))
    if len(shas) == 1:
        return shas[0]
    return _add(objects, index_object(directory, shas), directory, limit)


def _add(objects: dict[str, bytes], data: bytes, directory: str, limit: int) -> str:
    if len(data) > limit:  # a directory whose one entry is larger than any object may be: no reader takes it
        raise ManifestLimitError(
            f"the tree object of {directory!r} would have {len(data)} bytes, more than the limit of {limit} its "
            f"readers take; set {MANIFEST_BYTES_SETTING} higher where it is published and downloaded",
            limit=limit, actual=len(data), setting=MANIFEST_BYTES_SETTING)
    digest = digest_of_object(data)
    objects[digest] = data
    return digest

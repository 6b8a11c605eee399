"""Manifest format 3: a version's metadata as a Merkle tree of per-directory objects, and their exact bytes.

A version's manifest (``artifactkit.manifest/3``) is one line: the artifact's name, how its source was read, the
root directory's own entry, the digest of the root's *tree object* and the counts a download needs. Each directory
is a tree object (``artifactkit.tree/1``) stored in ``blobs/`` like any blob (a person can ``sha256sum`` it and
read it): its children's entries, one canonical line each — exactly the line format 2 gives that entry — and the
digest of each child directory's object. So a directory that did not change is the same object, stored once, in
every version that has it; a subtree is read without the rest; two versions differ only where digests differ.

Why every entry keeps its whole path (as format 2's line does) rather than its name: an object can stand for one
directory only, so no object reached twice can make a small store expand into a large tree, a self-reference is a
path that does not match, and every line is the one both engines already write byte for byte. The cost: a
directory moved elsewhere is stored again.

A directory of more than :data:`WHOLE_ENTRIES` entries is split by name into parts, each an object of the same form,
listed by an index object (``parts``): a part ends after an entry whose quoted path hashes to a multiple of
:data:`PART_AVERAGE` (content-defined, so adding a name changes one part, not every later one), after
:data:`PART_MAX_ENTRIES` entries or :data:`PART_BYTES` bytes. Every object a writer makes is canonical: the bytes
:func:`entries_object` and :func:`index_object` make of it. A reader holds an object to that form around its entry
lines, and each line to one ``path`` and one ``kind``; the lines themselves are parsed as format 2 parses them
(re-encoding each to check its key order would cost a download more than its parse).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Final

#: The version's manifest and a directory's tree object.
FORMAT: Final = "artifactkit.manifest/3"
TREE_FORMAT: Final = "artifactkit.tree/1"
#: How every format-3 manifest begins: a reader tells it from formats 1 and 2 by this alone.
ROOT_START: Final = re.compile(rb'\{"bytes": [0-9]+, "entries": [0-9]+, "files": [0-9]+, "format": "artifactkit'
                               rb'\.manifest/3", ')

#: How every tree object begins: a directory's entries, or a large one's index of its parts.
OBJECT_STARTS: Final = (b'{"entries": [', b'{"format": "' + TREE_FORMAT.encode() + b'", "parts": [')

#: A directory with at most this many entries is one object. Small parts keep what a change rewrites small: ten
#: files changed in ten directories under one root of 10,000 directories rewrite ten parts of the root's listing
#: (about 35 KB each at this size) besides the ten directories' own objects.
WHOLE_ENTRIES: Final = 256
#: A larger one's parts end, on average, every this many entries (where a path's hash says so)...
PART_AVERAGE: Final = 128
#: ...but never before this many,
PART_MIN_ENTRIES: Final = 16
#: and at the latest after this many entries or bytes of lines.
PART_MAX_ENTRIES: Final = 1024
PART_BYTES: Final = 1 << 20

#: A canonical entry line's path, as written (quoted, escaped): ``"path": "`` cannot occur inside a JSON string of
#: such a line (every quote in a string is escaped), so the first match is the key's.
PATH_IN_LINE: Final = re.compile(r'"path": ("(?:[^"\\]|\\.)*")')


def quoted(text: str) -> str:
    """``text`` as a canonical line writes it: JSON, ASCII only (what ``json.dumps(ensure_ascii=True)`` makes)."""
    return encode_basestring_ascii(text)


def part_ends_after(quoted_path: str) -> bool:
    """Whether a part of a large directory may end after the entry of ``quoted_path`` (its quoted path)."""
    digest = hashlib.sha256(quoted_path.encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big") % PART_AVERAGE == 0


def split_parts(lines: Sequence[tuple[str, str]]) -> list[Sequence[tuple[str, str]]]:
    """A directory's ``(quoted path, line)`` pairs, in order, as the parts of its objects (one, if it is small)."""
    if len(lines) <= WHOLE_ENTRIES and sum(len(line) for _, line in lines) <= PART_BYTES:
        return [lines]
    parts: list[Sequence[tuple[str, str]]] = []
    start, size = 0, 0
    for at, (path, line) in enumerate(lines):
        size += len(line) + 2
        count = at + 1 - start
        if count >= PART_MAX_ENTRIES or size >= PART_BYTES or (count >= PART_MIN_ENTRIES and part_ends_after(path)):
            parts.append(lines[start:at + 1])
            start, size = at + 1, 0
    if start < len(lines):
        parts.append(lines[start:])
    return parts


def entries_object(directory: str, lines: Sequence[str], trees: Sequence[tuple[str, str]]) -> bytes:
    """The object of ``directory``'s entry ``lines`` (canonical, in path order) and its subdirectories' objects
    ``trees`` (``(path, digest)``, in path order)."""
    entries = "[\n" + ",\n".join(lines) + "\n]" if lines else "[]"
    subtrees = "[\n" + ",\n".join(f'[{quoted(path)}, "{digest}"]' for path, digest in trees) + "\n]" if trees else "[]"
    return (f'{{"entries": {entries}, "format": "{TREE_FORMAT}", "path": {quoted(directory)}, '
            f'"trees": {subtrees}}}\n').encode("ascii")


def index_object(directory: str, parts: Sequence[str]) -> bytes:
    """The object listing the digests of ``directory``'s parts, in order."""
    listed = ",\n".join(f'"{digest}"' for digest in parts)
    return f'{{"format": "{TREE_FORMAT}", "parts": [\n{listed}\n], "path": {quoted(directory)}}}\n'.encode("ascii")


def root_manifest(name: str, source_read_noatime: bool, root_line: str, tree: str, *, entries: int, files: int,
                  file_bytes: int) -> bytes:
    """A version's manifest: its root entry's line, its root's object ``tree``, and the counts of the whole."""
    noatime = "true" if source_read_noatime else "false"
    return (f'{{"bytes": {file_bytes}, "entries": {entries}, "files": {files}, "format": "{FORMAT}", '
            f'"name": {quoted(name)}, "root": {root_line}, "source_read_noatime": {noatime}, '
            f'"tree": "{tree}"}}\n').encode("ascii")


def is_tree_manifest(body: bytes) -> bool:
    """Whether ``body`` is a format-3 manifest (every other is read as formats 1 and 2 are)."""
    return ROOT_START.match(body) is not None


def digest_of_object(data: bytes) -> str:
    """An object's name: the sha256 of its bytes, as a blob's."""
    return hashlib.sha256(data).hexdigest()

"""A published tree's format-3 manifest and objects, made from its canonical format-2 lines.

Both engines write the same format-2 lines byte for byte, in the same order (the differential suites hold them
to it); making the objects from those lines, in this one place, gives both engines the same objects by construction.

One pass over the lines, in their (path) order, with a stack of the directories whose subtree it is in: the
subtree of a directory is contiguous in path order, so a directory's object is made (and handed to the sink) as
soon as the walk leaves its subtree, its subdirectories' before it. Only the open directories' lines are held.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Final, Protocol

import attrs

from artifactkit.errors import ManifestLimitError
from artifactkit.manifest.encode import SortedLines
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

#: Takes each object as it is made: ``(digest, bytes)``.
Sink = Callable[[str, bytes], None]


class Listing(Protocol):
    """A manifest's canonical lines in path order and its head's values: a :class:`SortedLines`, or a publish in
    parts' (:mod:`~artifactkit.store.publish_parts`), whose ``source_read_noatime`` is known once its lines are read."""

    @property
    def name(self) -> str: ...

    @property
    def source_read_noatime(self) -> bool: ...

    def lines(self) -> Iterator[str]: ...


@attrs.frozen
class TreeObjects:
    """A version as format 3 stores it: its manifest (``root``, named by ``digest``) and every object of its tree,
    by digest (each directory's, and a large one's parts and index)."""

    root: bytes
    digest: str
    objects: dict[str, bytes]


def split_manifest(body: bytes) -> TreeObjects:
    """The format-3 manifest and every object of a canonical format-2 manifest ``body`` (as both engines write it)."""
    objects: dict[str, bytes] = {}
    head = json.loads(body[:body.index(b"\n")].decode("ascii")[:-1] + "}")
    root, digest = write_tree(SortedLines(head["name"], head["source_read_noatime"], (_lines(body),)),
                              objects.__setitem__)
    return TreeObjects(root, digest, objects)


@attrs.define
class _Open:
    """A directory whose subtree the pass is in: its path, its children's ``(quoted path, line)`` so far."""

    path: str
    prefix: str
    lines: list[tuple[str, str]] = attrs.field(factory=list)


@attrs.define
class _Pass:
    sink: Sink
    limit: int = attrs.field(factory=manifest_size_limit)
    #: Every directory's object digest, once made; a directory seen but not yet made is absent.
    made: dict[str, str] = attrs.field(factory=dict)
    stack: list[_Open] = attrs.field(factory=list)

    def enter(self, path: str, literal: str, line: str) -> None:
        parent = path.rpartition("/")[0] or "."
        while self.stack and self.stack[-1].path != parent and not path.startswith(self.stack[-1].prefix):
            self.close()
        if not self.stack or self.stack[-1].path != parent:
            self.stack.append(_Open(parent, "" if parent == "." else f"{parent}/"))
        self.stack[-1].lines.append((literal, line))

    def close(self) -> str:
        """Make the innermost open directory's object; its digest."""
        directory = self.stack.pop()
        digest = self.made[directory.path] = self.directory(directory.path, directory.lines)
        return digest

    def directory(self, path: str, lines: list[tuple[str, str]]) -> str:
        """Make ``path``'s object (or its parts and their index); return its digest. A subdirectory not made yet
        has no entries (the pass never entered its subtree): its empty object is made first."""
        shas: list[str] = []
        for part in split_parts(lines):
            trees = []
            for literal, line in part:
                if _DIR in line:
                    child: str = json.loads(literal) if "\\" in literal else literal[1:-1]
                    digest = self.made.pop(child, None)
                    trees.append((child, digest if digest is not None else self.add(entries_object(child, [], []),
                                                                                     child)))
            shas.append(self.add(entries_object(path, [line for _, line in part], trees), path))
        return shas[0] if len(shas) == 1 else self.add(index_object(path, shas), path)

    def add(self, data: bytes, directory: str) -> str:
        if len(data) > self.limit:  # a directory whose one entry is larger than any object may be: no reader takes it
            raise ManifestLimitError(
                f"the tree object of {directory!r} would have {len(data)} bytes, more than the limit of {self.limit} "
                f"its readers take; set {MANIFEST_BYTES_SETTING} higher where it is published and downloaded",
                limit=self.limit, actual=len(data), setting=MANIFEST_BYTES_SETTING)
        digest = digest_of_object(data)
        self.sink(digest, data)
        return digest


def _lines(body: bytes) -> Iterator[str]:
    """The entry lines of a canonical format-2 ``body``, without their commas, one at a time (a list of them all
    would be the manifest's size again)."""
    start = body.index(b"\n", body.index(b"\n") + 1) + 1  # past the head and '"entries": ['
    end = len(body) - len(b"\n]}\n")
    while start < end:
        stop = body.find(b"\n", start, end)
        stop = end if stop == -1 else stop
        line = body[start:stop].decode("ascii")
        yield line[:-1] if line.endswith(",") else line
        start = stop + 1


def write_tree(listing: Listing, sink: Sink) -> tuple[bytes, str]:
    """Hand every object of the canonical format-2 ``listing`` to ``sink`` as it is made (a directory's after its
    subdirectories'); return the format-3 manifest and its digest (its head's values asked once every line is read)."""
    walk = _Pass(sink)
    root_line = ""
    entries = files = file_bytes = 0
    for line in listing.lines():
        entries += 1
        found = PATH_IN_LINE.search(line)
        if found is None:  # a bug in a writer, never input: the engines wrote these lines
            raise ValueError(f"a manifest line without a path: {line[:200]!r}")
        literal = found.group(1)
        path: str = json.loads(literal) if "\\" in literal else literal[1:-1]
        if path == ".":
            root_line = line
            continue
        walk.enter(path, literal, line)
        if _FILE in line:
            files += 1
            if _LATER_NAME not in line and (size := _SIZE.search(line)) is not None:
                file_bytes += int(size.group(1))
    while walk.stack:
        walk.close()
    tree = walk.made.get(".") or walk.directory(".", [])  # none made: a tree of nothing but its root
    root = root_manifest(listing.name, listing.source_read_noatime, root_line, tree, entries=entries, files=files,
                         file_bytes=file_bytes)
    return root, digest_of_object(root)

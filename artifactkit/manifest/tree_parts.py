"""A format-3 tree read in parts of a bounded number of entries, in path order: what a download of any size holds at
once (issue 52's bounded memory).

The walk is :class:`~artifactkit.manifest.tree_read.Walk`'s (every object verified against its digest and checked
for its place, shape and canonical bytes before anything of it is used), one directory object (or one part of a
large directory) at a time, depth first, so that entries come out in the order a manifest lists them: a
subdirectory's subtree after every sibling that sorts before its name followed by ``/``. That order is what lets a
part be made on its own: a hard link's first name sorts before its later names, so it always exists already.

What a walk holds: its lines of one part, and the directories it is inside (one frame each: at most the tree's
depth), each with the subdirectories whose subtree is due once the siblings sorting before them are out (a few: a
subdirectory waits only behind names that extend its own with a character sorting before ``/``, so those waiting
at once are prefixes of one name, at most 255). A directory with a
million entries is read a part object at a time. The bound is the part's size, not the tree's.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any, Final

import attrs

from artifactkit.errors import IntegrityError
from artifactkit.manifest.limits import show
from artifactkit.manifest.tree_read import INDEX_KEYS, Fetch, TreeRoot, Walk, corrupt
from artifactkit.metadata.model import ROOT

#: Entries in one part of a download: enough that each part keeps the engine's threads busy, few enough that a part's
#: lines, listing and parsed entries stay within tens of megabytes.
PART_ENTRIES: Final = 20_000
#: Part objects of a split directory fetched at once (a bucket's requests for them overlap).
PARTS_AT_ONCE: Final = 8


@attrs.frozen
class TreePart:
    """One part of a version: its ``lines`` (``(path, canonical line)``, in path order); the directories made by an
    earlier part that they lie in (``made_before``, with their lines: a listing must hold every entry's parent); and
    the directories still open once it is made (``still_open``), whose metadata waits for a later part."""

    lines: list[tuple[str, str]]
    made_before: list[tuple[str, str]]
    still_open: frozenset[str]


@attrs.define
class _Frame:
    """A directory whose children are coming out: their lines, one ahead, and its subdirectories whose subtrees are
    due, keyed by ``path + "/"`` (their place in path order)."""

    path: str
    line: str
    children: Iterator[tuple[str, str, str | None]]
    ahead: tuple[str, str, str | None] | None = None
    due: list[tuple[str, str, str, str]] = attrs.field(factory=list)


class PathOrderWalk:
    """Every entry of ``root``'s tree but the root's own, in path order (:meth:`entries`); :meth:`open_dirs` names
    the directories made so far whose subtrees are not finished."""

    def __init__(self, root: TreeRoot, fetch: Fetch, *, where: str) -> None:
        self.walk = Walk(root, fetch, where, None)
        self.frames: list[_Frame] = []
        self.emitted = 0

    def open_dirs(self) -> list[tuple[str, str]]:
        """``(path, line)`` of every directory entered and not finished, and of every one listed and not entered."""
        found = [(frame.path, frame.line) for frame in self.frames]
        found += [(path, line) for frame in self.frames for _, path, line, _ in frame.due]
        return found

    def entries(self) -> Iterator[tuple[str, str]]:
        root = self.walk.root
        self.frames.append(_Frame(ROOT, root.root_line, self._children(ROOT, root.tree)))
        while self.frames:
            frame = self.frames[-1]
            if frame.ahead is None:
                frame.ahead = next(frame.children, None)
            if frame.due and (frame.ahead is None or frame.due[0][0] < frame.ahead[0]):
                _, subdir, subdir_line, subtree = heapq.heappop(frame.due)
                self.frames.append(_Frame(subdir, subdir_line, self._children(subdir, subtree)))
                continue
            if frame.ahead is None:
                self.frames.pop()
                continue
            path, line, object_digest = frame.ahead
            frame.ahead = None
            if object_digest is not None:
                heapq.heappush(frame.due, (f"{path}/", path, line, object_digest))
            self.emitted += 1
            yield path, line

    def _children(self, directory: str, digest: str) -> Iterator[tuple[str, str, str | None]]:
        """``(path, line, its object's digest if a directory)`` of ``directory``'s entries, an object at a time."""
        walk, last = self.walk, {directory: ""}
        for _, sha, (doc, data) in walk.objects([(directory, digest)]):
            if set(doc) != INDEX_KEYS:
                yield from self._of_object(directory, sha, doc, data, last)
                return
            parts = [(directory, part) for part in walk.index_parts(directory, sha, doc, data)]
            for start in range(0, len(parts), PARTS_AT_ONCE):
                for _, part, (part_doc, part_data) in walk.objects(parts[start:start + PARTS_AT_ONCE]):
                    if set(part_doc) == INDEX_KEYS or not part_doc.get("entries"):
                        raise corrupt(f"{walk.where}: tree object {part}", f"a part of {show(directory)} must hold "
                                                                           "entries")
                    yield from self._of_object(directory, part, part_doc, part_data, last)

    def _of_object(self, directory: str, digest: str, doc: dict[str, Any], data: bytes,
                   last: dict[str, str]) -> Iterator[tuple[str, str, str | None]]:
        walk = self.walk
        subtrees = walk.entries_of(directory, digest, doc, data, last)  # checks it all, lines into walk.lines
        lines, walk.lines = walk.lines, []
        # Its subdirectories are exactly its lines of kind dir, in the same order (the walk selects nothing).
        at = 0
        for path, line in lines:
            if at < len(subtrees) and subtrees[at][0] == path:
                at += 1
                yield path, line, subtrees[at - 1][1]
            else:
                yield path, line, None

    def check_counts(self) -> None:
        """A whole walk must find the counts the manifest states (a reader sizes its work by them)."""
        self.walk.check_counts(self.emitted + 1)


def in_parts(walk: PathOrderWalk, size: int) -> Iterator[TreePart]:
    """The tree of ``walk`` in parts of ``size`` entries (the last may be smaller, or hold none: it finishes what is
    open), in path order; the counts checked once the last is read."""
    made_before = [(ROOT, walk.walk.root.root_line)]
    lines: list[tuple[str, str]] = []
    for entry in walk.entries():
        lines.append(entry)
        if len(lines) >= size:
            still_open = walk.open_dirs()
            yield TreePart(lines, made_before, frozenset(path for path, _ in still_open))
            made_before, lines = still_open, []
    walk.check_counts()
    yield TreePart(lines, made_before, frozenset())


def first_names(root: TreeRoot, fetch: Fetch, paths: list[str], *, where: str) -> list[tuple[str, str]]:
    """The lines of hard links' first names made by an earlier part (``paths``), with every directory on their way:
    what a part's listing holds so that each later name's claims are checked against its first name's. Each is
    looked up from the root a directory at a time, an object at a time (never a subtree read whole: a later name
    may claim a directory of a million entries as its first name)."""
    found: dict[str, str] = {}
    looker = PathOrderWalk(root, fetch, where=where)
    for target in paths:
        directory, digest = ROOT, root.tree
        parts = target.split("/")
        for depth in range(1, len(parts) + 1):
            wanted = "/".join(parts[:depth])
            hit = next((child for child in looker._children(directory, digest) if child[0] == wanted), None)
            if hit is None or (depth < len(parts) and hit[2] is None):
                raise IntegrityError(f"{where}: a hard link names {show(target)}, which its tree lacks", path=where)
            found[wanted] = hit[1]
            if hit[2] is not None:
                directory, digest = wanted, hit[2]
    return sorted(found.items())

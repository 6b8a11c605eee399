"""Reading a format-3 manifest's tree: untrusted objects, each verified against its digest and checked for its
place, shape and canonical bytes before anything of it is used (the hostile-store rules: objects are data from
the store's writers).

What a walk returns is the version's entries as format 2's canonical lines, in path order: the engines then parse
and check them exactly as they parse a format-2 manifest, so a tree object can claim nothing a format-2
manifest could not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import attrs

from artifactkit.errors import IntegrityError, IntegrityFailure, ManifestLimitError
from artifactkit.manifest.encode import manifest_head
from artifactkit.manifest.fields import SHA256_RE
from artifactkit.manifest.limits import (
    MAX_PATH_BYTES,
    TREE_BYTES_SETTING,
    check_containers,
    clip,
    decode_manifest,
    decode_text,
    manifest_size_limit,
    show,
    tree_size_limit,
)
from artifactkit.manifest.paths import check_artifact_name, check_relpath
from artifactkit.manifest.tree_format import (
    FORMAT,
    PATH_IN_LINE,
    TREE_FORMAT,
    digest_of_object,
    entries_object,
    index_object,
    is_tree_manifest,
)

#: Reads the objects of the given digests from the store, in order; each is checked here, not there.
Fetch = Callable[[Sequence[str]], Sequence[bytes]]

#: An entry line as a canonical manifest writes it.
canonical_line: Final = json.JSONEncoder(sort_keys=True, ensure_ascii=True, separators=(", ", ": ")).encode
#: Objects asked of the store at once (a bucket's requests for them overlap).
FETCHED_AT_ONCE: Final = 64
_ROOT_KEYS: Final = frozenset({"bytes", "entries", "files", "format", "name", "root", "source_read_noatime", "tree"})
ENTRIES_KEYS: Final = frozenset({"entries", "format", "path", "trees"})
INDEX_KEYS: Final = frozenset({"format", "parts", "path"})


@attrs.frozen
class TreeRoot:
    """A format-3 manifest, checked: the artifact, how its source was read, its root entry and root object, and the
    counts the whole tree must have."""

    name: str
    source_read_noatime: bool
    root_line: str
    tree: str
    entries: int
    files: int
    file_bytes: int


def corrupt(where: str, why: str) -> IntegrityError:
    return IntegrityError(f"{where}: {clip(why)}", path=where, failed=IntegrityFailure.CORRUPT)


def parse_root(body: bytes, *, where: str) -> TreeRoot:
    """A format-3 manifest's fields, each of its type; its root entry must be the tree's ``"."``."""
    doc = decode_manifest(body, where=where)
    if not isinstance(doc, dict) or set(doc) != _ROOT_KEYS or doc["format"] != FORMAT:
        raise corrupt(where, f"not a {FORMAT} manifest (keys {show(sorted(doc) if isinstance(doc, dict) else doc)})")
    counts = [doc[key] for key in ("entries", "files", "bytes")]
    if not all(type(count) is int and count >= 0 for count in counts):
        raise corrupt(where, f"counts must be whole numbers, not {show(counts)}")
    noatime, tree, root = doc["source_read_noatime"], doc["tree"], doc["root"]
    if type(noatime) is not bool or type(tree) is not str or not SHA256_RE.fullmatch(tree):
        raise corrupt(where, f"invalid source_read_noatime {show(noatime)} or tree {show(tree)}")
    if not isinstance(root, dict) or root.get("path") != "." or root.get("kind") != "dir":
        raise corrupt(where, f"its root entry must be the directory '.', not {show(root)}")
    try:
        name = check_artifact_name(doc["name"])
    except ValueError as err:
        raise corrupt(where, str(err)) from err
    return TreeRoot(name, noatime, canonical_line(root), tree, *counts)


def names_tree(body: bytes, name: str, source_read_noatime: bool) -> bool:
    """Whether ``body`` is a format-3 manifest of ``name`` whose source was read as ``source_read_noatime`` says."""
    if not is_tree_manifest(body):
        return False
    try:
        root = parse_root(body, where="a recorded manifest")
    except (IntegrityError, ManifestLimitError):
        return False
    return root.name == name and root.source_read_noatime == source_read_noatime


_PATH_KEY: Final = '"path": "'
_KIND_KEY: Final = '"kind": "'
_DIR_KIND: Final = '"kind": "dir"'
_LATER_NAME: Final = '"hardlink": '
_FILE_KIND: Final = '"kind": "file"'
_SIZE: Final = re.compile(r'"size": ([0-9]+)')
#: How an object of entries begins (with some, or none) and where its entries end: no line holds a newline.
_ENTRIES_OPEN: Final = '{"entries": [\n'
_NO_ENTRIES_OPEN: Final = '{"entries": [], '
_ENTRIES_CLOSE: Final = "\n], "


def decode_object(data: bytes, *, where: str) -> dict[str, Any]:
    """A tree object's value, its ``entries`` as their lines (the listing's, parsed with it, never decoded here or
    encoded again), the rest decoded as one JSON object. Every container is counted first
    (:func:`~artifactkit.manifest.limits.check_containers`)."""
    check_containers(data, where=where)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as err:
        raise corrupt(where, "holds bytes beyond ASCII, which no object is written with") from err
    lines: list[str] | None = None
    if text.startswith(_ENTRIES_OPEN) and (end := text.find(_ENTRIES_CLOSE, len(_ENTRIES_OPEN))) >= 0:
        lines, rest = text[len(_ENTRIES_OPEN):end].split(",\n"), "{" + text[end + len(_ENTRIES_CLOSE):]
    elif text.startswith(_NO_ENTRIES_OPEN):
        lines, rest = [], "{" + text[len(_NO_ENTRIES_OPEN):]
    else:
        rest = text  # an index of parts, or nothing an object is
    doc = decode_text(rest, where=where)
    if not isinstance(doc, dict) or "entries" in doc:
        raise corrupt(where, f"is not a {TREE_FORMAT} object")
    if lines is not None:
        doc["entries"] = lines
    return doc


def line_facts(line: str, *, where: str) -> tuple[str, bool]:
    """An entry line's path and whether it is a directory, read from its text: a line holds one ``"path": "`` and
    one ``"kind": "`` (a quote inside a JSON string is always escaped, so these are its keys' own), else it is no
    entry as the writer makes one. The line itself is parsed later with the listing, as format 2 parses it."""
    if not (line.startswith("{") and line.endswith("}")) or line.count(_PATH_KEY) != 1 or line.count(_KIND_KEY) != 1:
        raise corrupt(where, f"line {show(line)} is not one entry as a manifest writes it")
    found = PATH_IN_LINE.search(line)
    if found is None:
        raise corrupt(where, f"line {show(line)} has no path")
    literal = found.group(1)
    path = decode_text(literal, where=where) if "\\" in literal else literal[1:-1]
    if type(path) is not str:
        raise corrupt(where, f"line {show(line)} has no path")
    return path, _DIR_KIND in line


def listing_body(root: TreeRoot, lines: list[tuple[str, str]]) -> bytes:
    """The format-2 manifest of ``lines`` (``(path, line)``; sorted here, then emptied) under ``root``'s head: what
    the engines parse. No size limit: every object was held to it."""
    lines.sort()
    text = manifest_head(root.name, root.source_read_noatime).decode("ascii") + ",\n".join(
        line for _, line in lines) + "\n]}\n"
    lines.clear()
    return text.encode("ascii")


@attrs.define
class Walk:
    """A walk of ``root``'s tree through ``fetch``: what it read is in :attr:`lines`, ``(path, canonical line)``
    (``select``: only entries at and under those paths, and the directories on the way)."""

    root: TreeRoot
    fetch: Fetch
    where: str
    select: tuple[str, ...] | None
    limit: int = attrs.field(factory=manifest_size_limit)
    tree_limit: int = attrs.field(factory=tree_size_limit)
    #: Bytes of objects read so far.
    read: int = 0
    lines: list[tuple[str, str]] = attrs.field(factory=list)
    links: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    found: set[str] = attrs.field(factory=set)
    files: int = 0
    file_bytes: int = 0

    def wanted(self, path: str) -> bool:
        return self.select is None or any(
            path == sub or path.startswith(f"{sub}/") or sub.startswith(f"{path}/") for sub in self.select)

    def objects(self, wanted: list[tuple[str, str]]) -> Iterator[tuple[str, str, Any]]:
        """``(directory, digest, decoded object)`` for each ``(directory, digest)``: verified, bounded, decoded;
        fetched :data:`FETCHED_AT_ONCE` at a time (a level of 10,000 directories is not held at once)."""
        for start in range(0, len(wanted), FETCHED_AT_ONCE):
            chunk = wanted[start:start + FETCHED_AT_ONCE]
            yield from self._checked(chunk, self.fetch([digest for _, digest in chunk]))

    def _checked(self, wanted: list[tuple[str, str]], found: Sequence[bytes]) -> Iterator[tuple[str, str, Any]]:
        for (directory, digest), data in zip(wanted, found, strict=True):
            where = f"{self.where}: tree object {digest} of {show(directory)}"
            self.read += len(data)
            if self.read > self.tree_limit:
                raise ManifestLimitError(
                    f"{self.where}: its tree objects hold more than the limit of {self.tree_limit} bytes; raise "
                    f"{TREE_BYTES_SETTING} if it is genuine", path=self.where, limit=self.tree_limit,
                    actual=self.read, setting=TREE_BYTES_SETTING)
            if len(data) > self.limit:
                raise ManifestLimitError(
                    f"{where} has {len(data)} bytes, more than the limit of {self.limit}; raise "
                    "ARTIFACTKIT_MAX_MANIFEST_BYTES if it is genuine", path=where, limit=self.limit,
                    actual=len(data), setting="ARTIFACTKIT_MAX_MANIFEST_BYTES")
            if (actual := digest_of_object(data)) != digest:
                raise IntegrityError(f"{where} is corrupt: its bytes hash to {actual}", path=where,
                                     expected=digest, actual=actual, failed=IntegrityFailure.CORRUPT)
            doc = decode_object(data, where=where)
            if doc.get("format") != TREE_FORMAT or doc.get("path") != directory:
                raise corrupt(where, f"is not the {TREE_FORMAT} object of {show(directory)}")
            yield directory, digest, (doc, data)

    def check_counts(self, entries: int) -> None:
        """A whole walk that found ``entries`` (the root's own included) must find every count the root states, not
        only the entries': a reader may size its work by any of them."""
        root = self.root
        held = (entries, self.files, self.file_bytes)
        if held != (root.entries, root.files, root.file_bytes):
            raise corrupt(self.where, f"its tree holds {held[0]} entries, {held[1]} files of {held[2]} bytes, not "
                                      f"the {root.entries}, {root.files} and {root.file_bytes} it states")

    def run(self) -> list[tuple[str, str]]:
        self.lines.append((".", self.root.root_line))
        self.subtree(".", self.root.tree)
        return self.lines

    def subtree(self, directory: str, digest: str) -> None:
        """Every entry under ``directory`` (whose object is ``digest``) into :attr:`lines`, a level at a time (a
        bucket's requests for one level overlap)."""
        level: list[tuple[str, str]] = [(directory, digest)]
        last: dict[str, str] = {}
        while level:
            level = self.read_level(level, last)

    def read_level(self, level: list[tuple[str, str]], last: dict[str, str]) -> list[tuple[str, str]]:
        """The entries of the directories ``level`` (``(directory, digest)``) into :attr:`lines`; returns their
        subdirectories to descend into, as ``(directory, digest)``. ``last``: each directory's last name so far."""
        following: list[tuple[str, str]] = []
        parts: list[tuple[str, str]] = []
        for directory, digest, (doc, data) in self.objects(level):
            if set(doc) == INDEX_KEYS:
                parts.extend((directory, part) for part in self.index_parts(directory, digest, doc, data))
            else:
                following.extend(self.entries_of(directory, digest, doc, data, last))
        for directory, digest, (doc, data) in self.objects(parts):
            if set(doc) != ENTRIES_KEYS or not doc["entries"]:
                raise corrupt(f"{self.where}: tree object {digest}", f"a part of {show(directory)} must hold entries")
            following.extend(self.entries_of(directory, digest, doc, data, last))
        return following

    def index_parts(self, directory: str, digest: str, doc: dict[str, Any], data: bytes) -> list[str]:
        parts = doc["parts"]
        # Each part at most once: an index naming one part a million times would cost a million reads before the
        # order of their names (strictly increasing across parts) could refuse it.
        if (not isinstance(parts, list) or len(parts) < 2
                or not all(type(part) is str and SHA256_RE.fullmatch(part) for part in parts)
                or len(set(parts)) != len(parts) or index_object(directory, parts) != data):
            raise corrupt(f"{self.where}: tree object {digest}", f"not a canonical index of {show(directory)}'s parts")
        return parts

    def entries_of(self, directory: str, digest: str, doc: dict[str, Any], data: bytes,
                 last: dict[str, str]) -> list[tuple[str, str]]:
        where = f"{self.where}: tree object {digest} of {show(directory)}"
        if set(doc) != ENTRIES_KEYS or not isinstance(doc["entries"], list) or not isinstance(doc["trees"], list):
            raise corrupt(where, "must hold entries and trees")
        prefix = "" if directory == "." else f"{directory}/"
        lines: list[str] = []
        subdirs: list[str] = []
        previous = last.get(directory, "")
        for line in doc["entries"]:
            path, is_dir = line_facts(line, where=where)
            if type(path) is not str or not path.startswith(prefix) or "/" in path[len(prefix):] or path <= previous:
                raise corrupt(where, f"entry {show(path)} is not the next child of {show(directory)} in path order")
            check_relpath(path, where=where)
            if len(path) > MAX_PATH_BYTES:
                raise corrupt(where, f"entry {show(path)} is longer than any path a system call takes")
            previous = path
            lines.append(line)
            if is_dir:
                subdirs.append(path)
            if self.wanted(path):
                self.lines.append((path, line))
                if self.select is not None:  # a whole walk asks for none: a set of every path is its size again
                    self.found.add(path)
                if _FILE_KIND in line:  # the counts the root states, read as the writer counted them
                    self.files += 1
                    if _LATER_NAME not in line and (size := _SIZE.search(line)) is not None:
                        self.file_bytes += int(size.group(1))
                if _LATER_NAME in line and self.select is not None:
                    raw = decode_text(line, where=where)
                    if isinstance(raw, dict) and "hardlink" in raw:
                        self.links.append((path, raw))
        last[directory] = previous
        trees = doc["trees"]
        if (not all(isinstance(pair, list) and len(pair) == 2 and type(pair[1]) is str
                    and SHA256_RE.fullmatch(pair[1]) for pair in trees)
                or [pair[0] for pair in trees] != subdirs):
            raise corrupt(where, "its trees must name exactly its subdirectories' objects, in order")
        if entries_object(directory, lines, [(path, sha) for path, sha in trees]) != data:
            raise corrupt(where, "not canonical (its bytes are not those its entries and trees are written as)")
        return [(path, sha) for path, sha in trees if self.wanted(path)]


def read_tree(root: TreeRoot, fetch: Fetch, *, where: str,
              select: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Every entry of the tree under ``root`` as ``(path, canonical line)`` (``select``: only the entries at and under
    those paths, and the directories on the way to them), reading only the objects needed; each object verified
    and checked before it is used. A whole walk must find the counts the manifest states."""
    chosen = None if select is None else tuple(check_relpath(sub, where=where) for sub in select)
    if chosen is not None and "." in chosen:
        chosen = None  # the root is a directory of the version like any other: it and everything under it
    walk = Walk(root, fetch, where, chosen)
    lines = walk.run()
    if chosen is None:
        walk.check_counts(len(lines))
        return lines
    missing = [sub for sub in chosen if sub not in walk.found and sub != "."]
    if missing:
        raise LookupError(f"{where} has no entry {missing[0]!r}")
    return _rejoin_links(lines, walk.links, {path for path, _ in lines})


def _rejoin_links(lines: list[tuple[str, str]], links: list[tuple[str, dict[str, Any]]],
                  kept: set[str]) -> list[tuple[str, str]]:
    """A part of a tree whose hard links' first names were left out: each such group's first name kept becomes its
    first (it carries the content already: every name of an inode records it)."""
    firsts: dict[str, str] = {}
    changed: dict[str, str] = {}
    for path, raw in sorted(links, key=lambda item: item[0]):
        target = raw["hardlink"]
        if target in kept:
            continue
        doc = dict(raw)
        if target in firsts:
            doc["hardlink"] = firsts[target]
        else:
            firsts[target] = path
            del doc["hardlink"]
        changed[path] = canonical_line(doc)
    return [(path, changed.get(path, line)) for path, line in lines]


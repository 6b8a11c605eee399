"""A format-3 version's tree objects read and forged by hand, as a person or a hostile writer of the store would.

Everything here goes through the documented, transparent layout only (a version's manifest is one line naming its
root's tree object; each directory's object is a blob named by its sha256), through
:mod:`tests.support.hostile_store`'s plain writes: never through :class:`Store`. What a forged object's bytes
are is said by the test that forges it; :func:`canonical_entries` writes them as a writer of the store would.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from artifactkit import ArtifactRef, Store
from tests.support.hostile_store import blob_bytes, forge_manifest, put_blob
from tests.support.stores import raw_manifest

TREE_FORMAT = "artifactkit.tree/1"


def line(entry: dict[str, Any]) -> str:
    """An entry as a canonical manifest line (written here, not by the package: the tests' own oracle)."""
    return json.dumps(entry, sort_keys=True, ensure_ascii=True, separators=(", ", ": "))


def canonical_entries(path: str, entries: list[dict[str, Any]], trees: list[tuple[str, str]]) -> bytes:
    """The canonical bytes of ``path``'s object holding ``entries`` and its subdirectories' ``trees``."""
    listed = "[\n" + ",\n".join(line(e) for e in entries) + "\n]" if entries else "[]"
    subtrees = "[\n" + ",\n".join(json.dumps([p, d]) for p, d in trees) + "\n]" if trees else "[]"
    return (f'{{"entries": {listed}, "format": "{TREE_FORMAT}", "path": {json.dumps(path)}, '
            f'"trees": {subtrees}}}\n').encode("ascii")


def canonical_index(path: str, parts: list[str]) -> bytes:
    """The canonical bytes of the index of ``path``'s ``parts``."""
    listed = ",\n".join(json.dumps(p) for p in parts)
    return f'{{"format": "{TREE_FORMAT}", "parts": [\n{listed}\n], "path": {json.dumps(path)}}}\n'.encode("ascii")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def root_doc(store: Store, ref: ArtifactRef) -> dict[str, Any]:
    """A version's format-3 manifest, decoded."""
    doc: dict[str, Any] = json.loads(raw_manifest(store, ref))
    return doc


def object_doc(store: Store, digest: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(blob_bytes(store, digest))
    return doc


def directory_objects(store: Store, ref: ArtifactRef) -> dict[str, str]:
    """Each directory of ``ref`` -> the digest of its object (an index, for a split one)."""
    found = {".": root_doc(store, ref)["tree"]}
    pending = ["."]
    while pending:
        directory = pending.pop()
        for part in parts_of(store, found[directory]):
            for path, digest in object_doc(store, part)["trees"]:
                found[path] = digest
                pending.append(path)
    return found


def parts_of(store: Store, digest: str) -> list[str]:
    """The objects holding the entries of the directory whose object is ``digest``: its parts, or itself."""
    doc = object_doc(store, digest)
    return list(doc["parts"]) if "parts" in doc else [digest]


def every_object(store: Store, ref: ArtifactRef) -> dict[str, str]:
    """Every object ``ref`` stands on (each directory's, a split one's parts and index) -> the directory's path."""
    found: dict[str, str] = {}
    for path, digest in directory_objects(store, ref).items():
        found[digest] = path
        found.update(dict.fromkeys(parts_of(store, digest), path))
    return found


def put_object(store: Store, data: bytes) -> str:
    """``data`` stored as a blob under its true digest (what any writer of the store can do); that digest."""
    digest = sha(data)
    put_blob(store, digest, data)
    return digest


def with_object(store: Store, ref: ArtifactRef, directory: str, digest: str, *, version: int,
                **counts: int) -> ArtifactRef:
    """A new version ``version`` of ``ref``'s name: ``ref``'s tree with ``directory``'s object replaced by
    ``digest`` (its parent names it; each ancestor's object is rewritten canonically up to the root, so only the
    replaced object is wrong). ``counts`` override the root's ``entries``, ``files``, ``bytes``."""
    objects = directory_objects(store, ref)
    while directory != ".":
        parent = directory.rpartition("/")[0] or "."
        doc = object_doc(store, objects[parent])
        trees = [(p, digest if p == directory else d) for p, d in doc["trees"]]
        digest = put_object(store, canonical_entries(parent, doc["entries"], trees))
        directory = parent
    root = root_doc(store, ref)
    return forge_root(store, ref.name, version, root, digest, **counts)


def forge_root(store: Store, name: str, version: int, root: dict[str, Any], tree: str, **counts: int) -> ArtifactRef:
    """``name@version`` made a format-3 manifest like ``root`` naming the object ``tree`` (``counts`` changed)."""
    doc = {**root, "tree": tree, **counts}
    body = (line(doc) + "\n").encode("ascii")
    return ArtifactRef(name, version, forge_manifest(store, name, version, body))

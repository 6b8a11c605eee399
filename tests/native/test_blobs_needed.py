"""The blobs a download reads (:class:`~artifactkit.engine.blobs.BlobsNeeded`) from the core's parse of a
manifest against the reference's of the same bytes: the same count, bytes and ``{sha256: size}`` — a digest
named twice with two sizes (a hostile manifest: the last size counts, as in a dict) included — and a local
store's download, which only counts them, makes no mapping of them."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifactkit import Store
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.blobs import BlobsNeeded
from artifactkit.engine.reference.lists import EntryList
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.parse import parse_manifest
from tests.support.engines import running_on
from tests.support.hostile_manifest import body, doc, file_entry

if TYPE_CHECKING:
    from artifactkit.engine.native import CoreTree


@pytest.fixture(scope="module")
def native_tree(native: ModuleType) -> ModuleType:
    """``artifactkit.engine.native``, which imports only where the core is built (a skip elsewhere, a failure in CI)."""
    return native


def _core_parse(native: ModuleType, data: bytes, digest: str) -> Any:
    """The native engine's parse of ``data`` (digest ``digest``), a ``CoreTree`` unless the core declined it."""
    return native.NativeEngine(1, "parse").parse(ArtifactRef("demo", 1, digest), data, where="m")


_DIGESTS = [hashlib.sha256(bytes([n])).hexdigest() for n in range(3)]
_files = st.lists(st.tuples(st.sampled_from(_DIGESTS), st.sampled_from([0, 1, 7, 2**40])), max_size=8)


@given(_files, st.booleans())
def test_the_cores_blobs_are_the_references(native_tree: ModuleType, files: list[tuple[str, int]],
                                            with_link: bool) -> None:
    entries = [file_entry(path=f"f{at}", sha256=sha, size=size) for at, (sha, size) in enumerate(files)]
    if with_link:  # a symlink names no blob
        entries.append({"path": "ln", "kind": "symlink", "mode": 0o777, "mtime_ns": 0, "atime_ns": 0,
                        "target": "f0"})
    data = body(doc(*entries)) if entries else body({**doc(), "entries": doc()["entries"][:1]})
    core = _core_parse(native_tree, data, hashlib.sha256(data).hexdigest())
    assert isinstance(core, native_tree.CoreTree), "the core parses every manifest here"
    reference = EntryList(parse_manifest(data, where="m").entries).blobs()
    mapping = dict(files)  # the last size of each digest
    assert reference.digests() == mapping
    assert (reference.count, reference.size) == (len(mapping), sum(mapping.values()))
    needed = core.blobs()
    assert (needed.count, needed.size, needed.digests()) == (reference.count, reference.size, mapping)


def test_a_local_download_counts_its_blobs_without_a_mapping(native_tree: ModuleType, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    materialize("basic", tmp_path / "src")
    store = Store(tmp_path / "store")
    store.publish(tmp_path / "src", "demo")
    asked: list[int] = []
    made: list[int] = []
    original = native_tree.CoreTree.blobs

    def counted(self: CoreTree) -> BlobsNeeded:
        asked.append(1)
        needed = original(self)
        return attrs.evolve(needed, make=lambda: made.append(1) or needed.make())

    monkeypatch.setattr(native_tree.CoreTree, "blobs", counted)
    with running_on("native"):
        store.download("demo", tmp_path / "dest")
    assert asked == [1], "the download took the core's parse (not the reference's, which a decline leaves it)"
    assert made == [], "a local store only counts the blobs"
    assert counted(_core_parse(native_tree, *_manifest(store))).digests(), "the count above could see a mapping made"
    assert made == [1]


def _manifest(store: Store) -> tuple[bytes, str]:
    """The newest version's entries as one format-2 manifest (its listing) and that listing's digest."""
    body = store.manifest(store.list()[-1]).to_bytes()
    return body, hashlib.sha256(body).hexdigest()

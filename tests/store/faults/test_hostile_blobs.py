"""A blob planted or rotted under its own name: same size, wrong bytes (issue 48, class 3).

The rule: a publish that reports success has a version that downloads exactly. A publish checks every blob it
deduplicates against by content (a local store's file, a bucket's object; with the stat cache too) and stores
its own bytes over a damaged one, so the store is repaired and every version naming that blob downloads again;
``verify`` names the damaged blob and each version it breaks. On both engines (this directory's ``engine``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import pytest

from artifactkit import Store, assert_metadata_equal, capture_tree
from artifactkit.cli.main import main
from artifactkit.errors import RepairedBlobsWarning
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store import stat_cache
from tests.support.hostile_store import (
    STORE_KINDS,
    blob_bytes,
    forge_manifest,
    manifest_doc,
    replace_blob,
    store_of_kind,
)

MIB = 1 << 20


def _small(path: Path) -> None:
    path.write_bytes(b"the victim's content\n" * 50)


def _large(path: Path) -> None:
    path.write_bytes(hashlib.sha256(b"seed").digest() * (9 * MIB // 32 + 1))  # over IN_MEMORY_LIMIT: staged copy


def _sparse(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.write(b"head" * 1024)
        handle.seek(4 * MIB)
        handle.write(b"tail" * 1024)


SHAPES = {"small": _small, "large": _large, "sparse": _sparse}


def _tree(src: Path, shape: str) -> Path:
    (src / "d").mkdir(parents=True)
    (src / "d" / "other.txt").write_text("an unrelated file\n")
    SHAPES[shape](src / "d" / "victim")
    return src


def _victim(store: Store, ref: ArtifactRef) -> str:
    sha = next(e.sha256 for e in store.manifest(ref).entries if e.path == "d/victim")
    assert sha is not None
    return sha


def _plant(store: Store, sha: str) -> None:
    """Same-size wrong bytes under the blob's own name: its last byte flipped (a prefix would still hash right)."""
    good = blob_bytes(store, sha)
    replace_blob(store, sha, good[:-1] + bytes([good[-1] ^ 1]))
    assert len(blob_bytes(store, sha)) == len(good)
    assert hashlib.sha256(blob_bytes(store, sha)).hexdigest() != sha


def _downloads_exactly(store: Store, ref: ArtifactRef, dest: Path) -> None:
    store.download(ref, dest)
    assert_metadata_equal(store.manifest(ref).entries, capture_tree(dest), stage="download")


def _publish_repairing(store: Store, src: Path, sha: str, **options: bool) -> ArtifactRef:
    """A publish that must say it repaired exactly the blob ``sha``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RepairedBlobsWarning)
        ref = store.publish(src, "demo", **options)
    repaired = [w.message for w in caught if issubclass(w.category, RepairedBlobsWarning)]
    assert [vars(message)["blobs"] for message in repaired] == [[sha]], [str(m) for m in repaired]
    return ref


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_publish_over_a_same_size_planted_blob_repairs_it_and_every_version_downloads(
        request: pytest.FixtureRequest, fast_tmp: Path, kind: str, shape: str) -> None:
    store = store_of_kind(kind, request, fast_tmp)
    src = _tree(fast_tmp / "src", shape)
    first = store.publish(src, "demo")
    sha = _victim(store, first)
    _plant(store, sha)
    second = _publish_repairing(store, src, sha)
    assert hashlib.sha256(blob_bytes(store, sha)).hexdigest() == sha
    _downloads_exactly(store, second, fast_tmp / "second")
    _downloads_exactly(store, first, fast_tmp / "first")  # the older version is whole again too
    report = store.verify()
    assert report.ok and report.broken_versions == [], report


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_verify_names_a_damaged_blob_and_every_version_it_breaks_until_a_publish_repairs_it(
        request: pytest.FixtureRequest, fast_tmp: Path, kind: str) -> None:
    store = store_of_kind(kind, request, fast_tmp)
    src = _tree(fast_tmp / "src", "small")
    store.publish(src, "demo")
    store.publish(src, "demo")
    store.publish(fast_tmp / "src" / "d", "other")  # holds the blob too, under another name
    sha = _victim(store, store.resolve("demo"))
    _plant(store, sha)
    report = store.verify()
    assert not report.ok
    assert report.broken_versions == ["demo@1", "demo@2", "other@1"], report
    (problem,) = report.corrupt
    assert sha in problem and "breaks demo@1, demo@2, other@1" in problem, problem
    _publish_repairing(store, src, sha)
    report = store.verify()
    assert report.ok and report.broken_versions == [], report
    for ref in store.list():
        _downloads_exactly(store, ref, fast_tmp / f"{ref.name}-{ref.version}")


@pytest.mark.parametrize("unchanged", [True, False], ids=["unchanged-tree", "entry-hits"])
def test_a_cached_republish_over_a_planted_blob_reads_the_source_and_repairs_it(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, unchanged: bool) -> None:
    monkeypatch.setattr(stat_cache, "RACY_WINDOW_NS", 0)  # the tree was just written: trust it at once
    store = Store(fast_tmp / "store")
    src = _tree(fast_tmp / "src", "small")
    first = store.publish(src, "demo", stat_cache=True)
    store.publish(src, "demo", stat_cache=True)  # a cache that vouches for every entry
    sha = _victim(store, first)
    _plant(store, sha)
    if not unchanged:
        (src / "d" / "other.txt").write_text("changed, so the tree is not the recorded one\n")
    third = _publish_repairing(store, src, sha, stat_cache=True)
    _downloads_exactly(store, third, fast_tmp / "third")
    _downloads_exactly(store, first, fast_tmp / "first")
    assert store.verify().ok


def test_the_cli_publish_says_how_many_blobs_it_repaired(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(fast_tmp / "store")
    src = _tree(fast_tmp / "src", "small")
    sha = _victim(store, store.publish(src, "demo"))
    _plant(store, sha)
    args = ["publish", str(src), "--store", str(store.root), "--name", "demo"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["repaired_blobs"] == [sha], doc
    _plant(store, sha)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"repaired 1 damaged blob in the store: {sha}" in out, out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["repaired_blobs"] == []


def test_a_publish_checks_a_blob_it_deduplicates_even_when_the_publish_has_it_twice(fast_tmp: Path) -> None:
    """Two files of one content in the tree: the first read decides, the second is deduplicated within the publish."""
    store = Store(fast_tmp / "store")
    src = _tree(fast_tmp / "src", "small")
    os.link(src / "d" / "victim", src / "twin-link")
    (src / "twin-copy").write_bytes((src / "d" / "victim").read_bytes())
    first = store.publish(src, "demo")
    sha = _victim(store, first)
    _plant(store, sha)
    second = _publish_repairing(store, src, sha)
    _downloads_exactly(store, second, fast_tmp / "second")


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_verify_blames_only_the_version_whose_recorded_size_the_blob_does_not_have(
        request: pytest.FixtureRequest, fast_tmp: Path, kind: str) -> None:
    store = store_of_kind(kind, request, fast_tmp)
    src = _tree(fast_tmp / "src", "small")
    first = store.publish(src, "demo")
    doc = manifest_doc(store, first)
    victim = next(e for e in doc["entries"] if e["path"] == "d/victim")
    victim["size"] += 1  # the blob hashes to its name: only demo@2's claim about it is impossible
    forge_manifest(store, "demo", 2, json.dumps(doc).encode())
    report = store.verify()
    assert report.broken_versions == ["demo@2"], report
    (problem,) = report.corrupt
    assert problem.endswith("; breaks demo@2"), problem


def test_a_bucket_republish_of_an_unchanged_tree_checks_its_blobs_by_the_listings_etags_without_a_get(
        request: pytest.FixtureRequest, fast_tmp: Path) -> None:
    """A one-PUT object's ETag is the MD5 of its bytes (artifactkit/store/s3/checks.py): equal to the MD5 of the
    bytes in hand, it is the content, and no GET is sent; a planted object's is not, and it is GET and put again."""
    store = store_of_kind("s3", request, fast_tmp)
    src = _tree(fast_tmp / "src", "small")
    sha = _victim(store, store.publish(src, "demo"))
    store.bucket.requests.clear()
    store.publish(src, "demo")
    assert store.bucket.requests["GetObject"] == 0, store.bucket.requests
    _plant(store, sha)
    store.bucket.requests.clear()
    _publish_repairing(store, src, sha)
    assert store.bucket.requests["GetObject"] == 1, store.bucket.requests  # only the planted one's

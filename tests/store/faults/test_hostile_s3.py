"""The hostile-store suite on both kinds of store: bytes a writer of the store forged by hand.

Every case writes through :mod:`tests.support.hostile_store` (plain file writes, plain ``put_object``)
and checks the store refuses with a named error, writes nothing outside the destination, and leaves
what it was given as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from artifactkit import IntegrityError, Store
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import IntegrityFailure, ManifestLimitError
from artifactkit.manifest.artifact_ref import ArtifactRef
from tests.support.hostile_store import (
    STORE_KINDS,
    blob_bytes,
    forge_manifest,
    manifest_doc,
    put_blob,
    replace_blob,
    store_of_kind,
)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_the_helper_forges_what_the_store_then_reads(kind: str, request: pytest.FixtureRequest,
                                                    fast_tmp: Path) -> None:
    store = store_of_kind(kind, request, fast_tmp)
    materialize("basic", fast_tmp / "src")
    ref = store.publish(fast_tmp / "src", "demo")
    doc = manifest_doc(store, ref)
    doc["entries"] = [e for e in doc["entries"] if e["kind"] == "dir"]
    body = json.dumps(doc).encode()
    forge_manifest(store, "demo", 2, body)
    assert [r.version for r in store.list()] == [1, 2]
    assert store.manifest("demo", 2).files() == []
    sha = store.manifest(ref).files()[0].sha256
    assert sha is not None
    replace_blob(store, sha, b"planted")
    assert blob_bytes(store, sha) == b"planted"
    with pytest.raises(IntegrityError, match="corrupt"):
        store.download(ref, fast_tmp / "out")
    assert not (fast_tmp / "out").exists()
    put_blob(store, "0" * 64, b"x")
    assert blob_bytes(store, "0" * 64) == b"x"


# -- S3: reads bounded by what the manifest says -------------------------------------------------

@pytest.fixture
def s3_demo(request: pytest.FixtureRequest, fast_tmp: Path) -> tuple[Store, ArtifactRef]:
    """A bucket store holding ``demo@1`` (the ``basic`` corpus tree)."""
    store = store_of_kind("s3", request, fast_tmp)
    materialize("basic", fast_tmp / "src")
    return store, store.publish(fast_tmp / "src", "demo")


@pytest.fixture
def body_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes read from every GET body (all go through the bucket's one body reader)."""
    from artifactkit.store.s3 import bodies

    counts: list[int] = []
    real_read = bodies.Body.read

    def counting_read(self: Any, size: int = -1) -> bytes:
        data: bytes = real_read(self, size)
        counts.append(len(data))
        return data

    monkeypatch.setattr(bodies.Body, "read", counting_read)
    return counts


def test_an_s3_blob_far_larger_than_its_manifest_size_is_corrupt_after_size_plus_one_bytes(
        s3_demo: tuple[Store, ArtifactRef], fast_tmp: Path, body_reads: list[int]) -> None:
    store, ref = s3_demo
    entry = max(store.manifest(ref).files(), key=lambda e: e.size)
    assert entry.sha256 is not None
    replace_blob(store, entry.sha256, b"\0" * (48 << 20))  # the planted object: 48 MiB where 1 file was
    body_reads.clear()
    with pytest.raises(IntegrityError, match=f"blob {entry.sha256} .* is corrupt: over {entry.size} bytes") as caught:
        store.download(ref, fast_tmp / "out")
    assert caught.value.failed == IntegrityFailure.CORRUPT  # type: ignore[attr-defined]
    assert sum(body_reads) <= sum(e.size for e in store.manifest(ref).files()) + 1
    assert not (fast_tmp / "out").exists()


def test_an_s3_manifest_over_the_limit_is_refused_before_its_body_is_read(
        s3_demo: tuple[Store, ArtifactRef], fast_tmp: Path, body_reads: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    store, ref = s3_demo
    doc = manifest_doc(store, ref)
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", "100000")
    forge_manifest(store, "demo", 2, json.dumps(doc).encode() + b" " * 400_000)  # valid JSON, pinned honestly
    body_reads.clear()
    with pytest.raises(ManifestLimitError, match="ARTIFACTKIT_MAX_MANIFEST_BYTES") as caught:
        store.download("demo", fast_tmp / "out", version=2)
    assert (caught.value.limit, caught.value.setting) == (100000, "ARTIFACTKIT_MAX_MANIFEST_BYTES")  # type: ignore[attr-defined]
    assert sum(body_reads) == 0  # Content-Length said it all
    assert not (fast_tmp / "out").exists()
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", str(1 << 20))  # the documented way to raise it
    store.download("demo", fast_tmp / "out", version=2)


# -- S3: sizes checked where they are cheap ------------------------------------------------------

def test_an_s3_publish_over_a_truncated_blob_puts_its_own_bytes_again(
        s3_demo: tuple[Store, ArtifactRef], fast_tmp: Path) -> None:
    store, ref = s3_demo
    entry = max(store.manifest(ref).files(), key=lambda e: e.size)
    assert entry.sha256 is not None
    whole = blob_bytes(store, entry.sha256)
    replace_blob(store, entry.sha256, whole[: len(whole) // 2])  # a writer's truncated (or planted) blob
    again = store.publish(fast_tmp / "src", "demo")
    assert blob_bytes(store, entry.sha256) == whole
    store.download(again, fast_tmp / "out")  # a publish that said ok has a version that downloads
    assert store.verify().ok


def test_s3_verify_names_each_version_whose_recorded_size_the_blob_does_not_have(
        s3_demo: tuple[Store, ArtifactRef]) -> None:
    store, ref = s3_demo
    doc = manifest_doc(store, ref)
    forged = next(e for e in doc["entries"] if e["kind"] == "file")
    forged["size"] += 1  # the blob hashes to its name: only the size is impossible
    forge_manifest(store, "demo", 2, json.dumps(doc).encode())
    report = store.verify()
    assert not report.ok
    assert len(report.corrupt) == 1 and f"demo@2:{forged['path']}" in report.corrupt[0], report.corrupt
    assert "demo@1" not in report.corrupt[0]  # the honest version is not blamed


# -- S3: one bad manifest does not hide the others -----------------------------------------------

def test_s3_ls_lists_every_readable_version_and_names_each_unreadable_manifest(
        s3_demo: tuple[Store, ArtifactRef], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from artifactkit.cli.main import main
    from artifactkit.errors import UnreadableManifestWarning

    store, ref = s3_demo
    body = store.manifest(ref).to_bytes()
    forge_manifest(store, "demo", 2, body, digest="0" * 64)  # its pin says another body: corrupt
    forge_manifest(store, "demo", 3, body + b" " * 2000)  # valid, but over the limit set below
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", str(len(body) + 1000))
    with pytest.warns(UnreadableManifestWarning) as caught:
        assert store.list() == [ref]
    named = sorted(str(w.message) for w in caught)
    assert len(named) == 2 and "demo@2" in named[0] and "demo@3" in named[1], named
    assert "manifests/demo/2.json" in named[0] and "ARTIFACTKIT_MAX_MANIFEST_BYTES" in named[1]
    assert main(["ls", "--store", store.root]) == 0  # the CLI says it itself: one note each (test_s3_ls_notes)
    out = capsys.readouterr().out
    assert "demo" in out and "note: left out demo@2" in out and "note: left out demo@3" in out
    report = store.verify()
    assert not report.ok and report.versions == 1
    assert [p.startswith("manifest demo@2") for p in report.corrupt] == [True]
    assert [p.startswith("manifest demo@3") for p in report.unreadable] == [True]
    with pytest.raises(IntegrityError, match="gc refuses"):  # nobody can say which blobs those need
        store.gc()

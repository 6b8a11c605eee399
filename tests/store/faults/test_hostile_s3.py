"""The hostile-store suite on both kinds of store: bytes a writer of the store forged by hand.

Every case writes through :mod:`tests.support.hostile_store` (plain file writes, plain ``put_object``)
and checks the store refuses with a named error, writes nothing outside the destination, and leaves
what it was given as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from artifactkit import IntegrityError
from artifactkit.conformance.corpus import materialize
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

"""Write a store's objects by hand, as a hostile or broken writer of the store would.

A shared store is only as safe as what it does with bytes someone else put there, so the
hostile-store suite (``tests/store/faults/``) forges manifests and blobs directly — with plain file
writes in a local store and plain ``put_object`` calls in a bucket, never through :class:`Store`.
The same call works on both kinds: a test parametrized over :data:`STORE_KINDS` gets its store from
:func:`store_of_kind` and runs one body against a directory and a real S3 server.

The helpers rely only on the documented, transparent layout (``docs/store.md``, ``docs/s3.md``):

================  =====================================  =======================================
                  local store (a path)                   bucket store (``s3://bucket/prefix``)
================  =====================================  =======================================
blob              ``ROOT/blobs/<sha>``                   ``PREFIX/blobs/<sha>``
manifest          ``ROOT/manifests/N/<v>.<digest>.json``  ``PREFIX/manifests/N/<v>.json``, user
                                                         metadata ``sha256`` pinning the body
================  =====================================  =======================================

Extend it by adding a function that dispatches on :func:`_bucket` like the ones below; keep each
one a single, obvious write, so a reader sees exactly what the attacker did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Final

import pytest

from artifactkit import Store
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store.layout import StoreLayout
from tests.store.s3.conftest import aws_env

#: Parametrize a test with ``@pytest.mark.parametrize("kind", STORE_KINDS)`` and call :func:`store_of_kind`.
STORE_KINDS: Final = ("local", "s3")
#: Pass as ``digest=`` to write a manifest without the bucket's ``sha256`` pin (a local store has none).
UNPINNED: Final = ""


def store_of_kind(kind: str, request: pytest.FixtureRequest, root: Path) -> Store:
    """A fresh empty store: a directory under ``root``, or a prefix on the test S3 server.

    The session's ``seaweedfs`` server is requested only for ``"s3"``, so a local case never starts
    it and an S3 case is skipped for its absence exactly as the other S3 tests are. It is set up as
    ``tests/store/s3``'s ``s3_url`` is (that fixture is not visible from other test directories).
    """
    if kind == "local":
        return Store(root / "store")
    if kind == "s3":
        endpoint = request.getfixturevalue("seaweedfs")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        for key, value in aws_env(endpoint).items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        return Store(f"s3://{endpoint.bucket}/t-{secrets.token_hex(6)}")
    raise ValueError(f"unknown store kind {kind!r}; expected one of {STORE_KINDS}")


def _bucket(store: Store) -> Any:
    """The store's bucket (an ``artifactkit.store.s3.objects.Bucket``), or None for a local store."""
    return getattr(store, "bucket", None)


def _local(store: Store) -> StoreLayout:
    return StoreLayout.at(store.root)


def _put(bucket: Any, key: str, body: bytes, metadata: dict[str, str] | None = None) -> None:
    # An unconditional PUT without a sha256 to check: what any S3 tool with write access can do.
    bucket.put(key, body, metadata=metadata or {})


def _write_file(path: str, data: bytes) -> None:
    """Replace ``path`` by a new file holding ``data`` (stored blobs are read-only: unlink, not open)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    Path(path).write_bytes(data)


def forge_manifest(store: Store, name: str, version: int, body: bytes, *, digest: str | None = None) -> str:
    """Make ``body`` (any bytes) the manifest of ``name@version``, replacing whatever was there.

    ``digest`` is what the store is told the body hashes to: by default the truth, so the store's
    digest check passes and what is tested is what it does with the *content*; pass another value
    to test the digest check itself (or :data:`UNPINNED` on S3 to omit the pin). Returns it.
    """
    claimed = hashlib.sha256(body).hexdigest() if digest is None else digest
    bucket = _bucket(store)
    if bucket is not None:
        _put(bucket, f"manifests/{name}/{version}.json", body, {"sha256": claimed} if claimed else None)
        return claimed
    folder = os.path.join(_local(store).manifests_dir, name)
    with contextlib.suppress(FileNotFoundError):
        for old in os.listdir(folder):
            if old.startswith(f"{version}."):
                os.unlink(os.path.join(folder, old))
    _write_file(os.path.join(folder, f"{version}.{claimed}.json"), body)
    return claimed


def manifest_doc(store: Store, ref: ArtifactRef) -> dict[str, Any]:
    """The JSON document of a published version, to edit and pass back to :func:`forge_manifest`."""
    doc: dict[str, Any] = json.loads(store.manifest(ref).to_bytes())
    return doc


def put_blob(store: Store, sha: str, data: bytes) -> None:
    """Store ``data`` under the blob name ``sha`` whether or not it hashes to it (created or replaced)."""
    bucket = _bucket(store)
    if bucket is not None:
        _put(bucket, f"blobs/{sha}", data)
    else:
        _write_file(_local(store).blob_path(sha), data)


def replace_blob(store: Store, sha: str, data: bytes) -> None:
    """Overwrite an existing blob with ``data``; ``FileNotFoundError`` if there is none (a typo'd sha)."""
    if not blob_exists(store, sha):
        raise FileNotFoundError(f"no blob {sha} in {store.root} to replace")
    put_blob(store, sha, data)


def remove_blob(store: Store, sha: str) -> None:
    """Delete the blob ``sha`` (absent is fine, as in S3)."""
    bucket = _bucket(store)
    if bucket is not None:
        bucket.delete(f"blobs/{sha}")
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_local(store).blob_path(sha))


def blob_exists(store: Store, sha: str) -> bool:
    bucket = _bucket(store)
    if bucket is not None:
        return bool(bucket.head(f"blobs/{sha}") is not None)
    return os.path.lexists(_local(store).blob_path(sha))


def blob_bytes(store: Store, sha: str) -> bytes:
    """What the store holds under the blob name ``sha``, read without any check."""
    bucket = _bucket(store)
    if bucket is not None:
        return bytes(bucket.get_bytes(f"blobs/{sha}"))
    return Path(_local(store).blob_path(sha)).read_bytes()

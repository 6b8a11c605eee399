"""One store suite, two backends: ``any_store`` is a fresh :class:`Store` in a directory and on a real S3 server.

A test that takes ``any_store`` runs once per backend (``[local]``, ``[s3]``) with one body. The S3 case gets a
fresh prefix on the session's SeaweedFS (``seaweedfs`` in ``tests/conftest.py``) through
:func:`tests.support.hostile_store.store_of_kind`, so it is skipped for a missing ``weed`` or boto3 exactly as
every other S3 test is, and ``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` turns that skip into a failure. The local store
is ``local_store_dir / "store"``: by default a directory of its own beside the test's work directory (so a
test's "nothing left beside the destination" sees the same names on both backends); a module whose store must
sit on a particular filesystem overrides the ``local_store_dir`` fixture.

What a test checks *inside* a store goes through the documented, transparent layout (``docs/store.md``,
``docs/s3.md``) with the helpers below, never through a backend's internals: a directory's files, a bucket's
keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from artifactkit import ArtifactRef, Store
from artifactkit.manifest.tree_format import OBJECT_STARTS
from artifactkit.store.layout import StoreLayout
from artifactkit.store.stat_cache import CACHE_NAME
from tests.support.crash import snapshot
from tests.support.hostile_store import STORE_KINDS, store_of_kind
from tests.support.tmpfs import scratch_dir

__all__ = ["STORE_KINDS", "any_store", "is_bucket", "local_store_dir", "nothing_stored", "plant_staging",
           "raw_manifest", "sibling_store", "staging_names", "stat_cache_path", "store_snapshot",
           "stored_names"]


@pytest.fixture
def local_store_dir() -> Iterator[Path]:
    """Where the local case's store goes: a fresh directory on a tmpfs where one exists, outside the test's own."""
    with scratch_dir("artifactkit-store-") as path:
        yield path


@pytest.fixture(params=STORE_KINDS)
def any_store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store: ``local`` (a directory, not yet created) or ``s3`` (a new prefix on SeaweedFS)."""
    if request.param == "local":
        return Store(request.getfixturevalue("local_store_dir") / "store")
    # Every store's stat cache lives in the user's cache directory: the test's own (``user_cache_dir``, autouse).
    return store_of_kind(request.param, request, Path())


def _bucket(store: Store) -> Any:
    return getattr(store, "bucket", None)


def is_bucket(store: Store) -> bool:
    """Whether ``store`` is the bucket backend's (for the few lines where the layouts differ)."""
    return _bucket(store) is not None


def stored_names(store: Store, under: str) -> list[str]:
    """Sorted names of what is stored directly under the layout directory ``under`` ("blobs", "manifests/x")."""
    bucket = _bucket(store)
    if bucket is not None:
        prefix = under.rstrip("/") + "/"
        return sorted({info.key[len(prefix):].partition("/")[0] for info in bucket.objects_under(prefix)})
    path = Path(store.root, under)
    return sorted(os.listdir(path)) if path.is_dir() else []


def stored_head(store: Store, key: str, size: int = 64) -> bytes:
    """The first ``size`` bytes of what is stored at ``key`` ("blobs/<sha>"): a file's, or an object's."""
    bucket = _bucket(store)
    if bucket is not None:
        return bytes(bucket.get_bytes(key)[:size])
    with open(Path(store.root, key), "rb") as handle:
        return handle.read(size)


def tree_object_names(store: Store) -> list[str]:
    """The names in ``blobs/`` that are tree objects (format 3's directories), not content."""
    return [name for name in stored_names(store, "blobs")
            if stored_head(store, f"blobs/{name}").startswith(OBJECT_STARTS)]


def root_directory_entries(store: Store, ref: ArtifactRef) -> list[dict[str, Any]]:
    """The entries of a format-3 version's root directory, read as a person would: the manifest names the root's
    tree object, a JSON file in ``blobs/`` (a small directory's one object) holding its children's entries."""
    tree = json.loads(raw_manifest(store, ref))["tree"]
    entries: list[dict[str, Any]] = json.loads(stored_head(store, f"blobs/{tree}", 1 << 20))["entries"]
    return entries


def content_blob_names(store: Store) -> list[str]:
    """The names in ``blobs/`` that hold files' content: every one but the tree objects."""
    objects = set(tree_object_names(store))
    return [name for name in stored_names(store, "blobs") if name not in objects]


def staging_names(store: Store) -> list[str]:
    """What a publish left half-made: a local store's ``staging/`` entries, a bucket's unfinished uploads."""
    bucket = _bucket(store)
    if bucket is not None:
        return sorted(bucket.abort_uploads_before(datetime.now(UTC).replace(year=9999), dry_run=True))
    return stored_names(store, "staging")


def plant_staging(store: Store, name: str) -> None:
    """What a killed publisher leaves: a directory in a local store's ``staging/``, a bucket's unfinished upload."""
    bucket = _bucket(store)
    if bucket is not None:
        # A plain boto3 client on the endpoint the AWS environment names (any_store set it): what any S3 tool
        # with write access can leave behind, not a call of the store's own client.
        import boto3

        client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                              region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
        client.create_multipart_upload(Bucket=bucket.bucket, Key=bucket.prefix + name)
        return
    os.mkdir(Path(store.root, "staging", name))


def store_snapshot(store: Store, *, times: bool = False) -> dict[str, tuple[object, ...]]:
    """Everything the store holds, to compare before and after: files (``snapshot``) or keys, sizes, ETags;
    with ``times`` also each file's mtime or each object's time of writing."""
    bucket = _bucket(store)
    if bucket is not None:
        found: dict[str, tuple[object, ...]] = {
            info.key: (info.size, info.etag, *((info.last_modified,) if times else ()))
            for info in bucket.objects_under("")}
        found.update({f"upload:{key}": () for key in staging_names(store)})
        return found
    return snapshot(Path(store.root), times=times) if os.path.lexists(store.root) else {}


def nothing_stored(store: Store) -> bool:
    """No store was made: no directory at a local root, no key under a bucket prefix."""
    bucket = _bucket(store)
    if bucket is not None:
        return store_snapshot(store) == {}
    return not os.path.lexists(store.root)


def sibling_store(store: Store, name: str) -> Store:
    """Another fresh store of the same kind beside ``store``: the directory ``name`` next to it, or the prefix
    ``PREFIX-name`` in the same bucket."""
    if is_bucket(store):
        return Store(f"{str(store.root).rstrip('/')}-{name}")
    return Store(Path(store.root).with_name(name))


def stat_cache_path(store: Store) -> Path:
    """The file of the store's stat cache, in the user's cache directory for either kind of store
    (``docs/store.md``; the ``user_cache_dir`` fixture points that at a directory of the test's own)."""
    from artifactkit.store.stat_cache_file import bucket_site, local_site

    bucket = _bucket(store)
    site = bucket_site(bucket.url()) if bucket is not None else local_site(store.root, os.stat(store.root))
    assert site.where is not None, "no user cache directory: ARTIFACTKIT_CACHE_DIR is set by every test"
    return Path(site.where, CACHE_NAME)


def listing_doc(store: Store, ref: ArtifactRef) -> dict[str, Any]:
    """A version's entries as one format-2 manifest document (``format``, ``name``, ``entries``): what a forger
    starts from, whatever format the version was stored in (format 3 keeps them in tree objects)."""
    doc: dict[str, Any] = json.loads(store.manifest(ref).to_bytes())
    return doc


def raw_manifest(store: Store, ref: ArtifactRef) -> bytes:
    """A version's manifest bytes as stored, read with no check (a file, or the object)."""
    bucket = _bucket(store)
    if bucket is not None:
        return bytes(bucket.get_bytes(f"manifests/{ref.name}/{ref.version}.json"))
    return Path(StoreLayout.at(store.root).manifest_path(ref)).read_bytes()

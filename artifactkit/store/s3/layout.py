"""Keys of a bucket store, ``s3://`` URLs, and reading versions (refs) back.

The same transparent layout as a local store, under the URL's prefix::

    blobs/<sha256>                    immutable, uncompressed content (any S3 tool can sha256sum it)
    manifests/<name>/<version>.json   one per version; created with If-None-Match: *, so the key *is*
                                      the version claim; user metadata ``sha256`` pins the body
    manifests/<name>/<v>.forgotten    empty: ``forget`` took the newest version, ``v``; claims go above it
    locks/gc, locks/publish/<token>   leases (see :mod:`artifactkit.store.s3.leases`)

The manifest key holds no digest (unlike a local store's file name): two publishers racing for
version 3 with different trees must collide on one key, or both would "win".
"""

from __future__ import annotations

import re
from typing import Final

from artifactkit.errors import IntegrityError, IntegrityFailure, ManifestLimitError, UnsafePathError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import digest_of
from artifactkit.manifest.limits import MANIFEST_BYTES_SETTING, manifest_size_limit
from artifactkit.store.s3.objects import Bucket

SCHEME: Final = "s3://"
_BUCKET_RE: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_MANIFEST_KEY: Final = re.compile(r"manifests/([A-Za-z0-9][A-Za-z0-9._+-]{0,127})/([1-9][0-9]*)\.json", re.ASCII)
SHA_RE: Final = re.compile(r"[0-9a-f]{64}", re.ASCII)
#: The environment variable :func:`manifest_size_limit` reads (named in every refusal).


def is_s3_url(root: object) -> bool:
    return isinstance(root, str) and root.startswith(SCHEME)


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix/")`` (prefix empty or ending in ``/``)."""
    bucket, _, prefix = url.removeprefix(SCHEME).partition("/")
    prefix = prefix.rstrip("/")
    if not _BUCKET_RE.fullmatch(bucket):
        raise UnsafePathError(f"{url!r}: {bucket!r} is not an S3 bucket name", path=url)
    # SeaweedFS keeps objects in a directory tree and lists "a//b" as "a/b": keys must be normalised.
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise UnsafePathError(f"{url!r}: the key prefix has an empty, '.' or '..' component", path=url)
    return bucket, f"{prefix}/" if prefix else ""


def blob_key(sha: str) -> str:
    return f"blobs/{sha}"


def manifest_key(name: str, version: int) -> str:
    return f"manifests/{name}/{version}.json"


def listed_versions(bucket: Bucket, name: str | None = None) -> list[tuple[str, int]]:
    """(name, version) of every manifest key (of ``name`` only, if given), sorted; no body is read."""
    found = []
    for info in bucket.objects_under(f"manifests/{name}/" if name else "manifests/"):
        match = _MANIFEST_KEY.fullmatch(info.key)
        if match:
            found.append((match[1], int(match[2])))
    return sorted(found)


#: ``manifests/<name>/<version>.forgotten``: the marker a forget leaves when a name's newest version goes.
_TAKEN_KEY: Final = re.compile(r"manifests/[A-Za-z0-9][A-Za-z0-9._+-]{0,127}/([1-9][0-9]*)\.(?:json|forgotten)",
                                   re.ASCII)


def forgotten_key(name: str, version: int) -> str:
    return f"manifests/{name}/{version}.forgotten"


def highest_taken(bucket: Bucket, name: str) -> int:
    """The highest version number ``name`` has used: its manifests' and its forgotten markers' (0 if none)."""
    found = [int(match[1]) for info in bucket.objects_under(f"manifests/{name}/")
             if (match := _TAKEN_KEY.fullmatch(info.key))]
    return max(found, default=0)


def fetch_version(bucket: Bucket, name: str, version: int) -> tuple[ArtifactRef, bytes] | None:
    """A version's ref and manifest bytes, checked against the digest pinned in its metadata; None if absent.

    A manifest object over :func:`manifest_size_limit` bytes is :class:`ManifestLimitError` before
    its body is read (Content-Length), or after limit + 1 bytes if the length lied: whoever can write
    the bucket must not be able to make ``ls`` or a download hold gigabytes in memory.
    """
    limit = manifest_size_limit()
    got = bucket.get_bounded(manifest_key(name, version), limit)
    if got is None:
        return None
    body, metadata, length = got
    if length > limit or len(body) > limit:
        where = bucket.url(manifest_key(name, version))
        raise ManifestLimitError(
            f"manifest of {name}@{version} at {where} is {length} bytes, over the limit of {limit}; "
            f"set {MANIFEST_BYTES_SETTING} to read it", path=where, limit=limit, actual=length,
            setting=MANIFEST_BYTES_SETTING)
    actual = digest_of(body)  # the ref's digest: a bucket's object is named by version, not by its hash
    pinned = metadata.get("sha256", actual)
    if pinned != actual:
        raise IntegrityError(
            f"manifest of {name}@{version} is corrupt: its bytes hash to {actual}, not {pinned}",
            path=bucket.url(manifest_key(name, version)), expected=pinned, actual=actual,
            failed=IntegrityFailure.CORRUPT)
    return ArtifactRef(name, version, actual), body

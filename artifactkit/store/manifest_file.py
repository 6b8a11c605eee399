"""Reading a version's manifest file out of a local store: checked open, bounded read, digest, parse."""

from __future__ import annotations

import errno
import os
import stat

from artifactkit.errors import IntegrityError, IntegrityFailure
from artifactkit.store.layout import ArtifactRef, StoreLayout
from artifactkit.store.manifest import Manifest, digest_of, parse_manifest


def read_manifest(layout: StoreLayout, ref: ArtifactRef) -> Manifest:
    """The verified manifest of a version: its bytes must hash to the digest that names it."""
    body = read_manifest_bytes(layout, ref)
    manifest = parse_manifest(body, where=f"manifest of {ref}")
    if manifest.name != ref.name:
        # A manifest copied (and renamed by its digest) from another artifact is not this one.
        raise IntegrityError(f"manifest of {ref} names another artifact, {manifest.name!r}",
                             path=layout.manifest_path(ref), expected=ref.name, actual=manifest.name,
                             failed=IntegrityFailure.CORRUPT)
    return manifest


def read_manifest_bytes(layout: StoreLayout, ref: ArtifactRef) -> bytes:
    """The bytes of a version's manifest, a regular file that hashes to the digest naming it, else
    :class:`IntegrityError` (or the ``OSError`` of a missing one)."""
    path = layout.manifest_path(ref)
    try:
        # O_NONBLOCK: a FIFO planted as a manifest is refused below rather than hanging the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise IntegrityError(f"manifest of {ref} is a symlink; manifests are plain files", path=path,
                             failed=IntegrityFailure.CORRUPT) from err
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IntegrityError(f"manifest of {ref} is not a regular file", path=path,
                                 failed=IntegrityFailure.CORRUPT)
        body = handle.read()
    if digest_of(body) != ref.digest:
        raise IntegrityError(
            f"manifest of {ref} is corrupt: its bytes hash to {digest_of(body)}, not {ref.digest}",
            path=path, expected=ref.digest, actual=digest_of(body), failed=IntegrityFailure.CORRUPT)
    return body

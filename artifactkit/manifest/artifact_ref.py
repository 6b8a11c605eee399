"""A published version's name, :class:`ArtifactRef`, and the check that a manifest's bytes are the ones it pins."""

from __future__ import annotations

import attrs

from artifactkit.errors import IntegrityError, IntegrityFailure
from artifactkit.manifest.encode import digest_of


@attrs.frozen(order=True)
class ArtifactRef:
    """One published version: name, version (from 1) and the sha256 of its manifest bytes."""

    name: str
    version: int
    digest: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


def check_manifest_digest(ref: ArtifactRef, body: bytes, where: str) -> None:
    """:class:`IntegrityError` (``CORRUPT``) unless ``body`` hashes to ``ref.digest``: read at ``where``."""
    if (actual := digest_of(body)) != ref.digest:
        raise IntegrityError(f"manifest of {ref} is corrupt: its bytes hash to {actual}, not {ref.digest}",
                             path=where, expected=ref.digest, actual=actual, failed=IntegrityFailure.CORRUPT)

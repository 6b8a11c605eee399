"""What :meth:`~artifactkit.store.store.Store.download` returns: the version restored, and what it could not verify."""

from __future__ import annotations

from typing import Any

import attrs

from artifactkit.manifest.artifact_ref import ArtifactRef


def _ref(value: ArtifactRef) -> ArtifactRef:
    return ArtifactRef(value.name, value.version, value.digest)


@attrs.frozen(eq=False, order=False)
class Downloaded(ArtifactRef):
    """The :class:`ArtifactRef` downloaded (it compares, sorts and hashes as that ref) and ``unverified``: the
    fields no read-back could prove, ``("mtime_ns", "atime_ns")`` on a filesystem whose client may serve them
    from a cache nothing here can look past (s3fs, rclone mount: no hard link to show a look fresh). They read
    back as set, perhaps from that cache. Empty when every entry was verified exact."""

    unverified: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return _ref(self) == _ref(other) if isinstance(other, ArtifactRef) else NotImplemented

    def __hash__(self) -> int:
        return hash(_ref(self))

    def __lt__(self, other: Any) -> bool:
        return _ref(self) < _ref(other) if isinstance(other, ArtifactRef) else NotImplemented

    def __le__(self, other: Any) -> bool:
        return _ref(self) <= _ref(other) if isinstance(other, ArtifactRef) else NotImplemented

    def __gt__(self, other: Any) -> bool:
        return _ref(self) > _ref(other) if isinstance(other, ArtifactRef) else NotImplemented

    def __ge__(self, other: Any) -> bool:
        return _ref(self) >= _ref(other) if isinstance(other, ArtifactRef) else NotImplemented

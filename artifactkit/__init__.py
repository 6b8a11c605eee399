"""artifactkit: prove that an artifact store preserves file metadata exactly."""

from artifactkit.check import Mismatch, assert_metadata_equal, compare
from artifactkit.errors import (
    ArtifactkitError,
    IntegrityError,
    IsolationError,
    MetadataMismatchError,
    NotInPrivateTreeError,
    SourceChangedError,
    TimestampNotRepresentable,
    UnsafePathError,
    UnsupportedFileType,
)
from artifactkit.maintenance import GcReport, VerifyReport
from artifactkit.manifest import Manifest
from artifactkit.meta import FileMeta, capture
from artifactkit.store import ArtifactRef, Store

__all__ = [
    "ArtifactRef",
    "ArtifactkitError",
    "FileMeta",
    "GcReport",
    "IntegrityError",
    "IsolationError",
    "Manifest",
    "MetadataMismatchError",
    "Mismatch",
    "NotInPrivateTreeError",
    "SourceChangedError",
    "Store",
    "TimestampNotRepresentable",
    "UnsafePathError",
    "UnsupportedFileType",
    "VerifyReport",
    "assert_metadata_equal",
    "capture",
    "compare",
]

"""artifactkit: prove that an artifact store preserves file metadata exactly."""

from artifactkit.check import Mismatch, assert_metadata_equal, compare
from artifactkit.diagnose import DiagnoseConfig, DiagnoseResult, run_diagnose
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
from artifactkit.isolation import NoatimeTree, check_tree_flagged, private_noatime_tree
from artifactkit.maintenance import GcReport, VerifyReport
from artifactkit.manifest import Manifest
from artifactkit.meta import FileMeta, capture
from artifactkit.probe import AtimeProbe, probe_atime
from artifactkit.store import ArtifactRef, Store

__all__ = [
    "ArtifactRef",
    "ArtifactkitError",
    "AtimeProbe",
    "DiagnoseConfig",
    "DiagnoseResult",
    "FileMeta",
    "GcReport",
    "IntegrityError",
    "IsolationError",
    "Manifest",
    "MetadataMismatchError",
    "Mismatch",
    "NoatimeTree",
    "NotInPrivateTreeError",
    "SourceChangedError",
    "Store",
    "TimestampNotRepresentable",
    "UnsafePathError",
    "UnsupportedFileType",
    "VerifyReport",
    "assert_metadata_equal",
    "capture",
    "check_tree_flagged",
    "compare",
    "private_noatime_tree",
    "probe_atime",
    "run_diagnose",
]

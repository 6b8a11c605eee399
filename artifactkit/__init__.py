"""artifactkit: prove that an artifact store preserves file metadata exactly.

The public face only: every name is imported from its module on first use (PEP 562), so
``import artifactkit`` — paid by every pytest session of every project that installs the
plugin — loads no store, tracing, multiprocessing or inotify machinery.
"""

# No import at run time here, not even ``from __future__``: the console script imports this package before it
# can turn a Ctrl-C into one line (artifactkit/cli/entry.py), and __future__, typing (with re and enum), even
# importlib, are files to load when the interpreter has not loaded them already. Type checkers take a
# module-level ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below imports on use
    from typing import Any

    from artifactkit import conformance
    from artifactkit.conformance.corpus import materialize
    from artifactkit.engine.reference.scan import capture_tree
    from artifactkit.errors import (
        ArtifactkitError,
        CopierCannotRunError,
        IntegrityError,
        IsolationError,
        ManifestLimitError,
        MetadataMismatchError,
        NotAStoreError,
        NotInPrivateTreeError,
        SourceChangedError,
        TimestampNotRepresentable,
        UnreadableManifestWarning,
        UnsafePathError,
        UnsafeStoreError,
        UnsupportedFileType,
    )
    from artifactkit.isolation.probe import AtimeProbe, probe_atime
    from artifactkit.isolation.tree import NoatimeTree, check_tree_flagged, private_noatime_tree
    from artifactkit.manifest.artifact_ref import ArtifactRef
    from artifactkit.manifest.encode import Manifest
    from artifactkit.metadata.compare import assert_metadata_equal, compare
    from artifactkit.metadata.mismatch import Mismatch
    from artifactkit.metadata.model import FileMeta, capture
    from artifactkit.store.gc import GcReport
    from artifactkit.store.store import Store
    from artifactkit.store.verify import VerifyReport
    from artifactkit.trace.engine import DiagnoseConfig, DiagnoseResult, run_diagnose

_HOME = {
    "ArtifactRef": "artifactkit.manifest.artifact_ref",
    "ArtifactkitError": "artifactkit.errors",
    "AtimeProbe": "artifactkit.isolation.probe",
    "CopierCannotRunError": "artifactkit.errors",
    "DiagnoseConfig": "artifactkit.trace.engine",
    "DiagnoseResult": "artifactkit.trace.engine",
    "FileMeta": "artifactkit.metadata.model",
    "GcReport": "artifactkit.store.gc",
    "IntegrityError": "artifactkit.errors",
    "IsolationError": "artifactkit.errors",
    "Manifest": "artifactkit.manifest.encode",
    "ManifestLimitError": "artifactkit.errors",
    "MetadataMismatchError": "artifactkit.errors",
    "Mismatch": "artifactkit.metadata.mismatch",
    "NoatimeTree": "artifactkit.isolation.tree",
    "NotAStoreError": "artifactkit.errors",
    "NotInPrivateTreeError": "artifactkit.errors",
    "SourceChangedError": "artifactkit.errors",
    "Store": "artifactkit.store.store",
    "TimestampNotRepresentable": "artifactkit.errors",
    "UnreadableManifestWarning": "artifactkit.errors",
    "UnsafePathError": "artifactkit.errors",
    "UnsafeStoreError": "artifactkit.errors",
    "UnsupportedFileType": "artifactkit.errors",
    "VerifyReport": "artifactkit.store.verify",
    "assert_metadata_equal": "artifactkit.metadata.compare",
    "capture": "artifactkit.metadata.model",
    "capture_tree": "artifactkit.engine.reference.scan",
    "check_tree_flagged": "artifactkit.isolation.tree",
    "compare": "artifactkit.metadata.compare",
    "materialize": "artifactkit.conformance.corpus",
    "private_noatime_tree": "artifactkit.isolation.tree",
    "probe_atime": "artifactkit.isolation.probe",
    "run_diagnose": "artifactkit.trace.engine",
}

__all__ = [
    "ArtifactRef",
    "ArtifactkitError",
    "AtimeProbe",
    "CopierCannotRunError",
    "DiagnoseConfig",
    "DiagnoseResult",
    "FileMeta",
    "GcReport",
    "IntegrityError",
    "IsolationError",
    "Manifest",
    "ManifestLimitError",
    "MetadataMismatchError",
    "Mismatch",
    "NoatimeTree",
    "NotAStoreError",
    "NotInPrivateTreeError",
    "SourceChangedError",
    "Store",
    "TimestampNotRepresentable",
    "UnreadableManifestWarning",
    "UnsafePathError",
    "UnsafeStoreError",
    "UnsupportedFileType",
    "VerifyReport",
    "assert_metadata_equal",
    "capture",
    "capture_tree",
    "check_tree_flagged",
    "compare",
    "conformance",
    "materialize",
    "private_noatime_tree",
    "probe_atime",
    "run_diagnose",
]


def __getattr__(name: str) -> "Any":
    import importlib  # noqa: PLC0415 - see TYPE_CHECKING above

    if name == "conformance":
        return importlib.import_module("artifactkit.conformance")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'artifactkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__

"""Hand-made manifests for the hostile-manifest tests: a valid document to start from, and one way to check a
refusal (a named error, with a message short enough for a person)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from artifactkit import IntegrityError, TimestampNotRepresentable, UnsafePathError
from artifactkit.errors import ManifestLimitError, TreeTooDeepError
from artifactkit.store.manifest import FORMAT
from tests.support.both_parses import parse_both

#: A path past PATH_MAX is TreeTooDeepError (an OSError, not an IntegrityError): still a named refusal.
NAMED = (IntegrityError, UnsafePathError, ManifestLimitError, TimestampNotRepresentable, TreeTooDeepError)
#: No refusal may carry the hostile value whole: a 100 MB path must not become a 100 MB message.
MESSAGE_LIMIT = 2000
T = 1_600_000_000_000_000_000
DATA = b"hello\n"
SHA = hashlib.sha256(DATA).hexdigest()
DEEP = 100_000


def root_entry() -> dict[str, Any]:
    return {"path": ".", "kind": "dir", "mode": 0o755, "mtime_ns": T, "atime_ns": T}


def file_entry(**changes: Any) -> dict[str, Any]:
    return {"path": "a", "kind": "file", "mode": 0o644, "mtime_ns": T, "atime_ns": T, "size": len(DATA),
            "sha256": SHA, **changes}


def doc(*entries: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"format": FORMAT, "name": "demo", "source_read_noatime": True,
            "entries": [root_entry(), *(entries or [file_entry()])], **top}


def body(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def with_raw(document: dict[str, Any], marker: str, raw: bytes) -> bytes:
    """``document`` with the JSON value ``"marker"`` replaced by ``raw`` bytes (what json.dumps cannot write)."""
    return body(document).replace(json.dumps(marker).encode(), raw)


def refusal(data: bytes) -> BaseException:
    """The named error ``parse_manifest`` raises for ``data``, checked to be short enough for a person."""
    with pytest.raises(NAMED) as caught:
        parse_both(data, where="m")
    assert len(str(caught.value)) <= MESSAGE_LIMIT, str(caught.value)[:300]
    return caught.value

"""Whatever the manifest parse accepts is restored exactly as claimed (issue 48, class 8): a hand-written manifest
with every kind and every field each may carry — foreign owners, ``user.*`` and ``trusted.*`` xattrs, inode
flags, holes, hard links of every linkable kind, devices — is downloaded as root on each engine, and a capture
of the result, independent of the download's own read-back (which let a lone foreign gid pass as "verified
exact"), holds every claimed field.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifactkit import Store
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import NotRestorableError
from artifactkit.metadata.compare import compare
from artifactkit.metadata.flags import InodeFlag
from artifactkit.store.manifest import FORMAT
from tests.support.both_parses import parse_both
from tests.support.capability import require_real_root
from tests.support.hostile_manifest import T, body, root_entry
from tests.support.hostile_store import forge_manifest, put_blob

UID, GID = 4242, 4343
NODUMP = int(InodeFlag.FS_NODUMP_FL)
DATA = b"dense\n"
#: A file of 1 MiB with two 4 KiB data runs and holes around them (tmpfs keeps holes page by page).
SPARSE_SIZE, RUNS = 1 << 20, [[0, 4096], [512 << 10, 4096]]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _entry(path: str, kind: str, mode: int, **claims: Any) -> dict[str, Any]:
    # Owners foreign, and a trusted.* xattr on every kind (user.* is for files and directories only).
    xattrs = [["trusted.note", _b64(path.encode())]]
    if kind in ("file", "dir"):
        xattrs.append(["user.origin", _b64(b"forged")])
    return {"path": path, "kind": kind, "mode": mode, "mtime_ns": T + len(path), "atime_ns": T - len(path),
            "uid": UID, "gid": GID, "xattrs": sorted(xattrs), **claims}


def _sparse() -> bytes:
    content = bytearray(SPARSE_SIZE)
    for start, length in RUNS:
        content[start:start + length] = b"r" * length
    return bytes(content)


def _manifest(dropped: dict[str, set[str]] | None = None) -> list[dict[str, Any]]:
    """Every kind with every field it may carry, but the ``dropped`` fields of each path (``"owner"``: both ids)."""
    sparse_sha = hashlib.sha256(_sparse()).hexdigest()
    entries = [
        {**root_entry(), "uid": UID, "gid": GID, "xattrs": [], "flags": 0},
        _entry("d", "dir", 0o2750, flags=NODUMP),
        _entry("d/f", "file", 0o4755, size=len(DATA), sha256=hashlib.sha256(DATA).hexdigest(), flags=NODUMP),
        _entry("d/sparse", "file", 0o640, size=SPARSE_SIZE, sha256=sparse_sha, extents=RUNS, flags=0),
        _entry("d/l", "symlink", 0o777, target="f"),
        _entry("d/p", "fifo", 0o620),
        _entry("d/c", "char", 0o600, rdev=[1, 3]),
        _entry("d/b", "block", 0o600, rdev=[7, 200]),
    ]
    for made in entries:
        for field in (dropped or {}).get(made["path"], set()):
            for key in ("uid", "gid") if field == "owner" else (field,):
                made.pop(key, None)
    # A later name of every linkable kind, each carrying its first name's every field, as the writer records it.
    entries += [{**first, "path": f"{first['path']}~", "hardlink": first["path"]}
                for first in entries if first["kind"] not in ("dir",)]
    return entries


def _store(root: Path) -> Store:
    """A store holding the blobs of :func:`_manifest`: a small dense one, and the sparse one with its holes."""
    store = Store(root)
    put_blob(store, hashlib.sha256(DATA).hexdigest(), DATA)
    sparse = Path(store.root) / "blobs" / hashlib.sha256(_sparse()).hexdigest()
    with sparse.open("wb") as handle:
        os.ftruncate(handle.fileno(), SPARSE_SIZE)
        for start, length in RUNS:
            os.pwrite(handle.fileno(), b"r" * length, start)
    return store


def test_every_claim_the_parse_accepts_is_restored_exactly_as_root(fast_tmp: Path) -> None:
    require_real_root("restore foreign owners, trusted.* xattrs and device nodes")
    store = _store(fast_tmp / "store")
    data = body({"format": FORMAT, "name": "demo", "source_read_noatime": True, "entries": _manifest()})
    claimed = parse_both(data).entries  # both parses accept it, entry for entry
    forge_manifest(store, "demo", 1, data)
    store.download("demo", fast_tmp / "out")
    restored = capture_tree(fast_tmp / "out")
    assert compare(claimed, restored) == []
    assert sorted(e.path for e in restored) == sorted(e.path for e in claimed)
    recorded = {e.path: e for e in restored}
    assert (recorded["d/c"].rdev, recorded["d/b"].rdev) == ((1, 3), (7, 200))
    assert recorded["d/sparse"].extents == tuple(map(tuple, RUNS)) and recorded["d/f"].flags == NODUMP
    assert all((e.uid, e.gid) == (UID, GID) for e in restored)
    assert all(("trusted.note", e.path.removesuffix("~").encode()) in (e.xattrs or ()) for e in restored
               if e.path != ".")


PATHS = [".", "d", "d/f", "d/sparse", "d/l", "d/p", "d/c", "d/b"]
OPTIONAL = ["owner", "xattrs", "flags", "extents"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dropped=st.dictionaries(st.sampled_from(PATHS), st.sets(st.sampled_from(OPTIONAL), min_size=1), max_size=4))
def test_any_subset_of_the_optional_claims_is_restored_as_claimed_or_refused_by_name(
        fast_tmp: Path, dropped: dict[str, set[str]]) -> None:
    require_real_root("restore foreign owners, trusted.* xattrs and device nodes")
    work = Path(tempfile.mkdtemp(dir=fast_tmp))
    store = _store(work / "store")
    data = body({"format": FORMAT, "name": "demo", "source_read_noatime": True, "entries": _manifest(dropped)})
    claimed = parse_both(data).entries
    forge_manifest(store, "demo", 1, data)
    try:
        store.download("demo", work / "out")
    except NotRestorableError as err:  # a setuid entry with no recorded owner: refused, never dropped
        assert "no recorded owner" in str(err) and not (work / "out").exists()
        return
    assert compare(claimed, capture_tree(work / "out")) == []

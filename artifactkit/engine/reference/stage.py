"""One source file read once and staged: the reference engine's per-file work of a publish."""

from __future__ import annotations

import os
from collections.abc import Callable

from artifactkit._os_calls import named
from artifactkit.engine.blob_check import HasBlob, StagedCopy
from artifactkit.engine.content import SourceRead, read_source, write_staged
from artifactkit.engine.values import Staged, StageItem, staging_name

Reader = Callable[..., SourceRead]


def stage_file(root: str, item: StageItem, txn_fd: int, has_blob: HasBlob, seen: set[str], *,
               read: Reader | None = None, in_memory: bool = False) -> Staged:
    """Read one source file once and stage its bytes if no blob (nor an earlier file here) holds them.
    ``has_blob``: the transaction's answer (:func:`~artifactkit.engine.blob_check.blob_lookup`'s, for a directory),
    which checks a stored blob against the bytes read, so a damaged one is stored again; ``seen``: digests this
    publish staged already; ``in_memory``: a small file's new bytes are returned, not written to staging."""
    index, entry, identity = item
    stage_name = staging_name(index)
    # read_source looked up at each call, not bound as a default: the tests count reads by wrapping it.
    found = (read or read_source)(f"{root}/{entry.path}", entry, identity, stage_fd=txn_fd, stage_name=stage_name)
    # A stored blob is checked against the bytes in hand: the small file's, or the copy staged (and hashed) as read.
    held = found.data if found.data is not None else StagedCopy(txn_fd, stage_name, found.extents)
    is_new = found.sha256 not in seen and not has_blob(found.sha256, entry.size, held)
    data = None
    if is_new:
        if found.data is not None and in_memory:
            data = found.data
        elif found.data is not None:
            write_staged(txn_fd, stage_name, found.data)
        seen.add(found.sha256)
    elif found.data is None:
        named("unlink", os.unlink, stage_name, dir_fd=txn_fd)  # copied while hashing, but already stored
    return Staged(index, found.sha256, found.noatime, found.flags, found.extents, is_new, data)

"""Child-process code for the fault suite: importable by ``spawn`` and runnable as a script.

As a script (``python3 tests/fault_workers.py publish VARIANT STORE NAME SRC...``) it publishes
under ``strace`` for the durability test; ``VARIANT`` other than ``correct`` is a deliberately
broken store whose one reordered step the outside checker must catch. The concurrency roles
below run in ``spawn`` processes until a shared deadline and report what they did.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

import artifactkit.store as store_module
from artifactkit.store import ArtifactRef, Store

#: Touched (as a failing stat) right after publish returns: the "before publish returns" line in a trace.
RETURN_MARKER = "/nonexistent-artifactkit-publish-returned"


class RenameBeforeFlushStore(Store):
    """Broken on purpose: blobs and manifest become visible first, and are flushed only afterwards."""

    def _commit_manifest(self, name: str, staged_manifest: str, digest: str) -> ArtifactRef:
        ref = super()._commit_manifest(name, staged_manifest, digest)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            REAL_SYNCFS(fd)
        finally:
            os.close(fd)
        return ref


REAL_SYNCFS: Callable[[int], None] = store_module.syncfs
REAL_FSYNC_DIR: Callable[..., None] = store_module.fsync_dir


def _skip_fsync_of(suffix: str) -> Callable[..., None]:
    def fsync_dir(path: str, **kwargs: Any) -> None:
        if not path.endswith(suffix):
            REAL_FSYNC_DIR(path, **kwargs)
    return fsync_dir


def publish_main(argv: list[str]) -> int:
    variant, root, name, *sources = argv
    store: Store = Store(root)
    if variant == "rename-before-flush":
        store_module.syncfs = lambda fd: None  # type: ignore[assignment]
        store = RenameBeforeFlushStore(root)
    elif variant == "no-name-dir-fsync":
        store_module.fsync_dir = _skip_fsync_of(f"/{name}")  # type: ignore[assignment]
    elif variant == "no-blobs-dir-fsync":
        store_module.fsync_dir = _skip_fsync_of("/blobs")  # type: ignore[assignment]
    elif variant != "correct":
        raise SystemExit(f"unknown variant {variant!r}")
    for src in sources:
        store.publish(src, name)
        with contextlib.suppress(FileNotFoundError):
            os.stat(RETURN_MARKER)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "publish":
        sys.exit(publish_main(sys.argv[2:]))
    raise SystemExit(f"unknown command {sys.argv[1]!r}")

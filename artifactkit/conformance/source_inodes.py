"""A "copy" that is the source: destination entries that are the source's own inodes.

A tree of hard links to the source (``cp -al``, a backup tool linking instead of copying) carries every
field of the source exactly, because it *is* the source: editing the copy edits the source. Only the
device and inode numbers show it. Both sides are looked at with ``lstat`` alone, so nothing moves.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from artifactkit.metadata import drift as dx
from artifactkit.metadata.mismatch import Mismatch

#: The field such a mismatch names (counted under ``hardlinks``: it is a link where a copy should be).
INODE = "inode"


def _inode(root: str, path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(root if path == "." else os.path.join(root, path))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def shared_with_source(src: str, source_paths: Iterable[str], dst: str, copy_paths: Iterable[str]) -> list[Mismatch]:
    """One ``shares-source-inode`` mismatch per entry of the copy that is an inode of the source."""
    source: dict[tuple[int, int], str] = {}
    for path in sorted(source_paths):
        if (key := _inode(src, path)) is not None:
            source.setdefault(key, path)
    found = []
    for path in sorted(copy_paths):
        if (key := _inode(dst, path)) is not None and key in source:
            found.append(Mismatch(path, INODE, "a new inode", f"the source's own inode ({source[key]})",
                                  dx.SHARES_SOURCE_INODE))
    return found

"""Sorting every difference the shared comparison finds into exactly one conformance check."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from artifactkit.conformance.failure import Failure
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import FileMeta
from artifactkit.store.scan import capture_tree

_SPECIAL_BITS: Final = 0o7000
#: The check each field beyond modes, times and content belongs to (an xattr field is ``xattr NAME``).
_EXTENDED: Final = {"uid": "owner", "gid": "owner", "hardlink": "hardlinks", "extents": "sparse",
                    "flags": "inode_flags"}


def with_source_facts(supplied: Iterable[FileMeta], src: str) -> dict[str, FileMeta]:
    """The supplied entries plus what the built source really holds beyond modes and times.

    Owners, xattrs (ACLs, capabilities), hard links, holes and flags are read from the source as
    built — an ACL the filesystem added, a hole it filled — with ``lstat``, ``llistxattr`` and the
    flags ioctl only: no content is read and no link target, so no source time moves.
    """
    found = {meta.path: meta for meta in capture_tree(src, hash_content=False, read_links=False)}
    return {meta.path: attrs.evolve(meta, uid=found[meta.path].uid, gid=found[meta.path].gid,
                                    xattrs=found[meta.path].xattrs, hardlink=found[meta.path].hardlink,
                                    extents=found[meta.path].extents, flags=found[meta.path].flags)
            for meta in supplied}


def time_check(kind: str, field: str) -> str:
    if kind == "dir":
        return "dir_times"
    if kind == "symlink":
        return "symlink_times"
    return field


def check_of(item: Mismatch, expected: dict[str, FileMeta]) -> list[str]:
    """The check (or, for a mode, the checks) ``item`` counts against."""
    if item.field == "mode":
        assert isinstance(item.expected, int) and isinstance(item.actual, int)
        changed = item.expected ^ item.actual
        return [name for name, bits in (("mode", 0o777), ("special_bits", _SPECIAL_BITS)) if changed & bits]
    if item.field in ("mtime_ns", "atime_ns"):
        return [time_check(expected[item.path].kind, item.field)]
    if item.field.startswith("xattr "):
        return ["xattrs"]
    return [_EXTENDED.get(item.field, "content")]  # presence, kind, size, sha256, target


def destination_failures(corpus: str, expected: dict[str, FileMeta], mismatches: Iterable[Mismatch]) -> list[Failure]:
    return [Failure(check, corpus, item) for item in mismatches for check in check_of(item, expected)]


def tagged(check: str, corpus: str, mismatches: Iterable[Mismatch]) -> list[Failure]:
    return [Failure(check, corpus, m) for m in mismatches]

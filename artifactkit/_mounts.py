"""Which mount holds a path (``/proc/self/mountinfo``), and whether its filesystem's client may answer ``stat``
from a cache: what the probe, the strict fixture and a download's read-back each need to know about where they
are, in one place below every room."""

from __future__ import annotations

import os
from typing import Final

import attrs

#: Filesystem types whose clients may serve attributes from a cache (mountinfo's type; ``fuse.*`` by prefix).
CACHING_TYPES: Final = frozenset({"fuse", "fuseblk", "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "virtiofs",
                                  "afs", "lustre", "glusterfs", "orangefs"})

#: Longer than FUSE's default attribute and entry timeouts (1 s; rclone mount's --attr-timeout too): what ``stat``
#: shows after this is the daemon's answer, not the kernel's copy of what was just set.
PAST_ATTRIBUTE_CACHE_S: Final = 1.5


@attrs.frozen
class MountInfo:
    """The mount that holds a path, from ``/proc/self/mountinfo``."""

    mount_point: str
    fs_type: str
    options: tuple[str, ...]


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_info(path: str | os.PathLike[str], mountinfo: str = "/proc/self/mountinfo") -> MountInfo:
    """The mount holding ``path``: the longest mount point prefix of its realpath (last one wins)."""
    real = os.path.realpath(path)
    best: MountInfo | None = None
    with open(mountinfo, encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 6 or len(tail) < 1:
                continue
            point = _unescape(fields[4])
            inside = point in (real, "/") or real.startswith(point.rstrip("/") + "/")
            if not inside or (best is not None and len(point) < len(best.mount_point)):
                continue
            options = fields[5].split(",") + (tail[2].split(",") if len(tail) > 2 else [])
            # Later lines with the same point are mounts stacked on top: they win.
            best = MountInfo(point, tail[0], tuple(dict.fromkeys(options)))
    if best is None:
        raise OSError(f"no mount in {mountinfo} holds {real!r}")
    return best


def may_cache_attributes(fs_type: str) -> bool:
    """Whether ``fs_type`` is a network or FUSE filesystem whose client can answer ``stat`` from a cache."""
    return fs_type in CACHING_TYPES or fs_type.startswith(("fuse.", "nfs"))

"""Comparing what ``cp -a`` keeps beyond modes and times: owners, xattrs (ACLs, capabilities), hard
links, holes and inode flags — each difference named so a reader can act on it."""

from __future__ import annotations

from artifactkit.metadata import drift as dx
from artifactkit.metadata.flags import COMPARED_FLAGS
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import LINKABLE_KINDS, FileMeta
from artifactkit.metadata.render import extents_text, flags_text, xattr_text


def compare_extended(exp: FileMeta, act: FileMeta, fields: tuple[str, ...]) -> list[Mismatch]:
    """Differences in the fields recorded on both sides (``None`` on either side is "not recorded")."""
    found: list[Mismatch] = []
    for field in ("uid", "gid"):
        want, got = getattr(exp, field), getattr(act, field)
        if field in fields and None not in (want, got) and want != got:
            found.append(Mismatch(exp.path, field, want, got, dx.OWNER_DIFFERS))
    if "xattrs" in fields and exp.xattrs is not None and act.xattrs is not None and exp.xattrs != act.xattrs:
        wanted, have = dict(exp.xattrs), dict(act.xattrs)
        for name in sorted(wanted.keys() | have.keys()):
            before, after = wanted.get(name), have.get(name)
            if before == after:
                continue
            verdict = (dx.XATTR_MISSING if after is None else dx.XATTR_UNEXPECTED if before is None
                       else dx.XATTR_DIFFERS)
            found.append(Mismatch(exp.path, f"xattr {name}", xattr_text(name, before), xattr_text(name, after),
                                  verdict))
    # FIFOs and devices have hard links too (a kind differs before this is reached).
    if "hardlink" in fields and exp.kind in LINKABLE_KINDS and exp.hardlink != act.hardlink and _recorded(exp, act):
        verdict = dx.HARDLINK_JOINED if exp.hardlink is None else dx.HARDLINK_SPLIT
        found.append(Mismatch(exp.path, "hardlink", exp.hardlink, act.hardlink, verdict))
    if ("extents" in fields and exp.kind == "file" and exp.extents != act.extents and _recorded(exp, act)
            and exp.extents is not None):
        # No hole left is "filled"; holes kept but fewer or smaller (a coarser hole unit) is "coarsened":
        # the first reads as "densified", the second is a copy that still saves most of the space.
        verdict = (dx.SPARSE_FILLED if act.extents is None
                   else dx.SPARSE_COARSENED if _data_bytes(act.extents) > _data_bytes(exp.extents) else dx.DIFFERS)
        found.append(Mismatch(exp.path, "extents", extents_text(exp.extents, exp.size),
                              extents_text(act.extents, act.size), verdict))
    if "flags" in fields and exp.flags is not None and act.flags is not None:
        want_flags, got_flags = exp.flags & COMPARED_FLAGS, act.flags & COMPARED_FLAGS
        if want_flags != got_flags:
            found.append(Mismatch(exp.path, "flags", flags_text(want_flags), flags_text(got_flags), dx.FLAGS_DIFFER))
    return found


def _recorded(exp: FileMeta, act: FileMeta) -> bool:
    # Hard links and holes are part of a full capture; owners are recorded in every full capture,
    # so they tell a full capture from a partial one (a corpus tree, a version-1 manifest).
    return exp.uid is not None and act.uid is not None


def _data_bytes(extents: tuple[tuple[int, int], ...]) -> int:
    return sum(length for _, length in extents)

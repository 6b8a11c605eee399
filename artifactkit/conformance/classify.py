"""Sorting every difference the shared comparison finds into exactly one conformance check."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from artifactkit.conformance.copy_reads import CopyEvidence
from artifactkit.conformance.failure import Failure
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata import drift as dx
from artifactkit.metadata.flags import COMPARED_FLAGS
from artifactkit.metadata.mismatch import PRESENCE, TIME_FIELDS, Mismatch
from artifactkit.metadata.model import SPECIAL_KINDS, FileMeta

_SPECIAL_BITS: Final = 0o7000
#: The check each field beyond modes, times and content belongs to (an xattr field is ``xattr NAME``).
_EXTENDED: Final = {"uid": "owner", "gid": "owner", "hardlink": "hardlinks", "inode": "hardlinks", "extents": "sparse",
                    "flags": "inode_flags", "rdev": "special_files"}
#: What ``special_files`` holds for a FIFO or device node: its kind (presence), rdev, mode, owner and times.
#: Its xattrs and hard links stay with their own checks, as for any entry.
_SPECIAL_FILE_CHECKS: Final = frozenset({"content", "mode", "special_bits", "mtime_ns", "atime_ns", "owner"})


def _home(check: str, kind: str | None) -> str:
    """``special_files`` for what a FIFO or device carries, else ``check``."""
    return "special_files" if kind in SPECIAL_KINDS and check in _SPECIAL_FILE_CHECKS else check


def with_source_facts(supplied: Iterable[FileMeta], src: str) -> dict[str, FileMeta]:
    """The supplied entries plus what the built source really holds beyond modes and times.

    Owners, xattrs (ACLs, capabilities), hard links, holes, flags and ctime are read from the source as
    built — an ACL the filesystem added, a hole it filled — with ``lstat``, ``llistxattr`` and the
    flags ioctl only: no content is read and no link target, so no source time moves.
    """
    found = {meta.path: meta for meta in capture_tree(src, hash_content=False, read_links=False)}
    return {meta.path: attrs.evolve(meta, uid=found[meta.path].uid, gid=found[meta.path].gid,
                                    xattrs=found[meta.path].xattrs, hardlink=found[meta.path].hardlink,
                                    extents=found[meta.path].extents, flags=found[meta.path].flags,
                                    ctime_ns=found[meta.path].ctime_ns)  # evidence of a later write
            for meta in supplied}


def time_check(kind: str, field: str) -> str:
    if kind == "dir":
        return "dir_times"
    if kind == "symlink":
        return "symlink_times"
    return field


def check_of(item: Mismatch, expected: dict[str, FileMeta]) -> list[str]:
    """The check (or, for a mode, the checks) ``item`` counts against."""
    exp = expected.get(item.path)
    kind = None if exp is None else exp.kind
    return list(dict.fromkeys(_home(check, kind) for check in _check_of(item, expected)))


def _check_of(item: Mismatch, expected: dict[str, FileMeta]) -> list[str]:
    if item.field == "mode":
        assert isinstance(item.expected, int) and isinstance(item.actual, int)
        changed = item.expected ^ item.actual
        return [name for name, bits in (("mode", 0o777), ("special_bits", _SPECIAL_BITS)) if changed & bits]
    if item.field in ("mtime_ns", "atime_ns"):
        return [time_check(expected[item.path].kind, item.field)]
    if item.field.startswith("xattr "):
        return ["xattrs"]
    return [_EXTENDED.get(item.field, "content")]  # presence, kind, size, sha256, target


def carried(meta: FileMeta) -> list[tuple[str, str]]:
    """(check, field) for every check whose field ``meta`` carries: what an entry loses with its kind.

    Times and permission bits every entry has; the rest only where the source recorded something
    (special bits set, an owner, an xattr, a second name of an inode, holes, a compared flag).
    """
    found = [("mode", "mode")]
    if meta.mode & _SPECIAL_BITS:
        found.append(("special_bits", "mode"))
    found += [(time_check(meta.kind, field), field) for field in ("mtime_ns", "atime_ns")]
    found += [("owner", field) for field in ("uid", "gid") if getattr(meta, field) is not None]
    if meta.xattrs:
        found.append(("xattrs", "xattrs"))
    if meta.hardlink is not None:
        found.append(("hardlinks", "hardlink"))
    if meta.extents is not None:
        found.append(("sparse", "extents"))
    if meta.flags is not None and meta.flags & COMPARED_FLAGS:
        found.append(("inode_flags", "flags"))
    if meta.rdev is not None:
        found.append(("special_files", "rdev"))
    return list(dict.fromkeys((_home(check, meta.kind), field) for check, field in found))


#: What every tree exercises whatever it holds: every entry has content (or a kind), an owner, and a place in
#: the later read and in the source.
_ALWAYS_CARRIED: Final = ("content", "owner", "survives_read", "source_untouched")


def checks_carried(entries: Iterable[FileMeta]) -> set[str]:
    """The checks a tree of ``entries`` can fail by what it holds: a tree without a second name of an inode
    cannot show a split link, so ``hardlinks`` passing on it alone would be a pass with nothing behind it."""
    return {*_ALWAYS_CARRIED, *(check for meta in entries for check, _ in carried(meta))}


#: Fields whose value means the same whatever the kind: a link turned into a file by the same owner kept
#: its owner. Times and mode bits do not (a file's times are not a link's), nor do holes, links and flags.
_KIND_FREE: Final = frozenset({"uid", "gid", "xattrs"})


def _lost_with_the_entry(item: Mismatch, exp: FileMeta, act: FileMeta | None) -> list[tuple[str, Mismatch]]:
    """A changed kind or a missing entry fails every check the source entry carries, not only content:
    a link turned into a file has lost its link times, whatever times the file got."""
    return [(check, Mismatch(item.path, field, getattr(exp, field),
                             None if act is None else getattr(act, field), item.diagnosis))
            for check, field in carried(exp)
            if act is None or field not in _KIND_FREE or getattr(exp, field) != getattr(act, field)]


def with_tree_diagnoses(mismatches: Iterable[Mismatch], expected: dict[str, FileMeta], actual: dict[str, FileMeta],
                        source_after: dict[str, FileMeta],
                        rivals: dict[tuple[str, str], tuple[str, ...]] | None = None, *,
                        seen: CopyEvidence | None = None) -> list[Mismatch]:
    """The time mismatches re-explained with what only the whole run knows: the source's values after the
    copy (an atime the copier recorded after its own read), what the kit saw of the copy (reads of each inode
    while the copier ran, each entry's birth time: ``seen``) and the tree's other differences (one rule
    applied to every entry, see :func:`drift.uniform_diagnoses`; a ``differs`` several explanations fit alike
    gets their names in ``rivals`` by path and field). Other mismatches pass unchanged."""
    items = list(mismatches)
    timed = [i for i, m in enumerate(items) if m.field in TIME_FIELDS and m.delta_ns is not None]
    cases = []
    for i in timed:
        item, act = items[i], actual[items[i].path]
        after = source_after.get(item.path)
        assert isinstance(item.expected, int) and isinstance(item.actual, int)
        cases.append(dx.TimeCase(item.expected, item.actual, item.field, act.ctime_ns, act.mtime_ns,
                                 expected[item.path].mtime_ns,
                                 None if after is None else getattr(after, item.field),
                                 None if seen is None else seen.reads.get(item.path),
                                 None if seen is None else seen.btime_ns.get(item.path)))
    tied: dict[int, tuple[str, ...]] = {}
    for i, diagnosis in zip(timed, dx.uniform_diagnoses(cases, tied), strict=True):
        if diagnosis is not None:
            items[i] = attrs.evolve(items[i], diagnosis=diagnosis)
    if rivals is not None:
        rivals.update({(items[timed[k]].path, items[timed[k]].field): names for k, names in tied.items()})
    # An entry whose mtime the copier never set had its atime never set either: that a listing of the copier's
    # own came after its last write (advanced-by-read) or before it is the tool's ordering (rclone's roots).
    unset = {m.path for m in items if m.field == "mtime_ns" and m.diagnosis == dx.OMITTED}
    return [attrs.evolve(m, diagnosis=dx.OMITTED)
            if m.field == "atime_ns" and m.diagnosis == dx.ADVANCED_BY_READ and m.path in unset else m
            for m in items]


def read_first_only_where_consistent(failures: list[Failure]) -> list[Failure]:
    """``read-before-recorded`` only where every copy-time atime of that check, over the whole run, says so.

    Timestamps come from a coarse clock: a copier that never sets atime, writing in the same tick as it
    read the source, leaves a value equal to the source's by coincidence (rsync -a on some files of a
    tree, not others). A copier that records after reading does so for every entry. So where one check
    holds both names (in any corpus tree), they are all ``omitted``: a label never claims more than the
    run shows (zip stores its subdirectories' atimes after listing them, checked by hand, but not its
    root's, so its directories read ``omitted``).
    """
    groups: dict[str, set[str]] = {}
    for f in failures:
        if f.field == "atime_ns" and f.diagnosis in (dx.OMITTED, dx.READ_BEFORE_RECORDED):
            groups.setdefault(f.check, set()).add(f.diagnosis)
    mixed = {check for check, names in groups.items() if len(names) > 1}
    return [attrs.evolve(f, mismatch=attrs.evolve(f.mismatch, diagnosis=dx.OMITTED))
            if f.diagnosis == dx.READ_BEFORE_RECORDED and f.check in mixed else f for f in failures]


def destination_failures(corpus: str, expected: dict[str, FileMeta], mismatches: Iterable[Mismatch],
                         actual: dict[str, FileMeta] | None = None,
                         rivals: dict[tuple[str, str], tuple[str, ...]] | None = None) -> list[Failure]:
    found = []
    for item in mismatches:
        tied = (rivals or {}).get((item.path, item.field), ())
        found += [Failure(check, corpus, item, rivals=tied) for check in check_of(item, expected)]
        if item.field == "kind" or (item.field == PRESENCE and item.diagnosis == dx.MISSING):
            exp, act = expected[item.path], (actual or {}).get(item.path)
            found += [Failure(check, corpus, lost) for check, lost in _lost_with_the_entry(item, exp, act)]
    return found


#: Checks whose failures are not differences of the copy from the source as the copier made it.
_NOT_THE_COPY: Final = frozenset({"source_untouched", "survives_read"})


def rivals_settled_by_the_run(failures: list[Failure]) -> list[Failure]:
    """A ``differs`` that several rules explained alike on its tree, named by the one of them the same copier shows
    unambiguously elsewhere in the run: first in the same check (entries of the same kind, copied the same way:
    ``shutil.copytree``'s directories whose recorded atime is also their birth stamp, settled by its directories
    where the two differ), else for that field anywhere (rsync's whole-second atimes on ``edge-times`` settle
    ``special-files``, where every atime shares its second with its mtime); ``differs`` where the run does not
    settle it (none shown, or several)."""
    shown: dict[tuple[str, str], set[str]] = {}
    for f in failures:
        # The copy's own differences only: the source's moved atimes say nothing of how the copy's were set.
        if not f.rivals and f.check not in _NOT_THE_COPY:
            shown.setdefault((f.check, f.field), set()).add(f.diagnosis)
            shown.setdefault(("", f.field), set()).add(f.diagnosis)
    settled = []
    for f in failures:
        for where in (f.check, ""):
            names = [name for name in f.rivals if name in shown.get((where, f.field), set())]
            if names:
                break
        settled.append(attrs.evolve(f, mismatch=attrs.evolve(f.mismatch, diagnosis=names[0]), rivals=())
                       if len(names) == 1 else f)
    return settled


def tagged(check: str, corpus: str, mismatches: Iterable[Mismatch]) -> list[Failure]:
    return [Failure(check, corpus, m) for m in mismatches]

"""The one shared assertion: compare supplied metadata with what a stage produced, and explain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from artifactkit.errors import MetadataMismatchError
from artifactkit.metadata import drift as dx
from artifactkit.metadata.extended_compare import compare_extended
from artifactkit.metadata.mismatch import PRESENCE, TIME_FIELDS, Mismatch
from artifactkit.metadata.model import FileMeta

#: Every field :func:`compare` checks, in report order. The fields after the times are compared only
#: where both sides recorded them (``None`` means "not recorded", e.g. a version-1 manifest).
FIELDS: Final = ("kind", "mode", "size", "sha256", "target", "rdev", "mtime_ns", "atime_ns",
                 "uid", "gid", "xattrs", "hardlink", "extents", "flags")
MetaTree = Iterable[FileMeta] | Mapping[str, FileMeta] | FileMeta


def _by_path(tree: MetaTree) -> dict[str, FileMeta]:
    if isinstance(tree, FileMeta):
        return {tree.path: tree}
    if isinstance(tree, Mapping):
        return dict(tree)
    return {meta.path: meta for meta in tree}


def compare(expected: MetaTree, actual: MetaTree, *, fields: Iterable[str] = FIELDS) -> list[Mismatch]:
    """Every difference between two trees (or two entries), each with its diagnosis.

    ``expected`` must be the values *originally supplied*, never a later re-stat: a re-stat
    would already carry the drift this is meant to find. Content is compared by sha256 only
    where both sides have one (a capture taken before reading has none yet).
    """
    wanted = tuple(fields)
    exp, act = _by_path(expected), _by_path(actual)
    found: list[Mismatch] = []
    for path in sorted(exp.keys() | act.keys()):
        if path not in act:
            found.append(Mismatch(path, PRESENCE, exp[path].kind, None, dx.MISSING))
        elif path not in exp:
            found.append(Mismatch(path, PRESENCE, None, act[path].kind, dx.UNEXPECTED))
        else:
            found.extend(_compare_entry(exp[path], act[path], wanted))
    return found


def _compare_entry(exp: FileMeta, act: FileMeta, fields: tuple[str, ...]) -> list[Mismatch]:
    if exp.kind != act.kind:
        return [Mismatch(exp.path, "kind", exp.kind, act.kind, dx.KIND_DIFFERS)] if "kind" in fields else []
    found: list[Mismatch] = []
    if "mode" in fields and exp.mode != act.mode:
        found.append(Mismatch(exp.path, "mode", exp.mode, act.mode, dx.MODE_DIFFERS))
    if exp.kind == "file":
        if "size" in fields and exp.size != act.size:
            found.append(Mismatch(exp.path, "size", exp.size, act.size, dx.CONTENT_DIFFERS))
        if ("sha256" in fields and None not in (exp.sha256, act.sha256) and exp.sha256 != act.sha256):
            found.append(Mismatch(exp.path, "sha256", exp.sha256, act.sha256, dx.CONTENT_DIFFERS))
    if exp.kind == "symlink" and "target" in fields and exp.target != act.target and act.target is not None:
        found.append(Mismatch(exp.path, "target", exp.target, act.target, dx.CONTENT_DIFFERS))
    if "rdev" in fields and exp.rdev != act.rdev and None not in (exp.rdev, act.rdev):
        found.append(Mismatch(exp.path, "rdev", _rdev_text(exp.rdev), _rdev_text(act.rdev), dx.RDEV_DIFFERS))
    for field in TIME_FIELDS:
        if field not in fields:
            continue
        want, got = getattr(exp, field), getattr(act, field)
        verdict = dx.classify_time(want, got, field=field, ctime_ns=act.ctime_ns, mtime_ns=act.mtime_ns,
                                   expected_mtime_ns=exp.mtime_ns)
        if verdict is not None:
            found.append(Mismatch(exp.path, field, want, got, verdict, delta_ns=got - want))
    found.extend(compare_extended(exp, act, fields))
    return found


def _rdev_text(rdev: tuple[int, int] | None) -> str:
    """A device number as ``ls -l`` and ``mknod`` write it."""
    return "none" if rdev is None else f"{rdev[0]},{rdev[1]}"


def format_mismatches(mismatches: Iterable[Mismatch], *, stage: str) -> str:
    """The assertion message: a headline, then every mismatch grouped per path."""
    items = list(mismatches)
    paths: dict[str, list[Mismatch]] = {}
    for item in items:
        paths.setdefault(item.path, []).append(item)
    diagnoses = sorted({item.diagnosis for item in items})
    lines = [f"metadata mismatch at stage {stage!r}: {len(items)} mismatch(es) in {len(paths)} path(s) "
             f"[{', '.join(diagnoses)}]"]
    for path, group in paths.items():
        lines.append(f"  {path}")
        lines.extend(f"    {item.describe()}" for item in group)
    return "\n".join(lines)


def assert_metadata_equal(expected: MetaTree, actual: MetaTree, *, stage: str,
                          fields: Iterable[str] = FIELDS) -> None:
    """The one shared assertion for every stage ("publish", "download", or a caller's label).

    Raises :class:`MetadataMismatchError` (an ``AssertionError``) listing every mismatch per
    path and field with ns values, delta and diagnosis; ``mismatches`` holds them, stage set.
    """
    found = [attrs.evolve(item, stage=stage) for item in compare(expected, actual, fields=fields)]
    if found:
        raise MetadataMismatchError(format_mismatches(found, stage=stage), stage=stage, mismatches=found)

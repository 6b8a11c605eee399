"""Path rules shared by publish (source trees) and download (manifests).

A manifest is untrusted input: every path is checked lexically here, and the restore never
follows a link (``dir_fd`` + ``O_NOFOLLOW``), so both a forged path and a planted symlink fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Final, Literal

from artifactkit.errors import TreeTooDeepError, UnsafePathError
from artifactkit.manifest.limits import MAX_PATH_BYTES, show
from artifactkit.metadata.model import ROOT, FileMeta

_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def check_relpath(path: object, *, where: str) -> str:
    """Return ``path`` if it is ``"."`` or a clean relative POSIX path; raise otherwise."""
    if type(path) is str and _clean(path):
        return path
    if not isinstance(path, str) or not path:
        raise UnsafePathError(f"{where}: empty or non-string path {path!r}", path=str(path))
    if path == ROOT:
        return path
    problem = None
    if "\x00" in path:
        problem = "contains NUL"
    elif path.startswith("/"):
        problem = "is absolute"
    elif path.endswith("/"):
        problem = "ends with '/'"
    else:
        parts = path.split("/")
        if "" in parts:
            problem = "has an empty component ('//')"
        elif ".." in parts:
            problem = "contains '..'"
        elif "." in parts:
            problem = "contains '.'"
    if problem:
        raise UnsafePathError(f"{where}: path {path!r} {problem}; paths must stay inside the tree",
                              path=path)
    return path


#: A path of this many characters or fewer is within :data:`MAX_PATH_BYTES`: each is at most 4 bytes of UTF-8.
_SHORT: Final = MAX_PATH_BYTES // 4


def check_path_max(path: str, *, where: str) -> None:
    """:class:`TreeTooDeepError` for a path longer than a system call takes (:data:`MAX_PATH_BYTES` bytes, its
    file name's bytes as ``os.fsencode`` makes them): no download could make it, and no publish records it."""
    try:
        size = len(os.fsencode(path))
    except UnicodeEncodeError:
        return  # no name's bytes at all: refused as that where it matters (manifest._check_encodable)
    if size > MAX_PATH_BYTES:
        raise TreeTooDeepError(
            f"{where}: entry {show(path)} is nested deeper than a path the kernel accepts (PATH_MAX, "
            f"{MAX_PATH_BYTES + 1} bytes with its NUL: it has {size}); artifacts hold trees whose every path "
            "fits", path=path[:_SHOWN_PATH], where=where, limit=MAX_PATH_BYTES, actual=size)


#: How much of a path too long a refusal keeps in its ``path``.
_SHOWN_PATH: Final = 200


def _clean(path: str) -> bool:
    """Whether ``path`` is ``"."`` or clean, in four substring tests (C): wrapped in slashes, a clean path has
    no empty, ``.`` or ``..`` component, and no NUL. :func:`check_relpath` names what is wrong otherwise;
    a property test holds the two to the same answer. (It runs once per entry of every manifest read.)"""
    wrapped = f"/{path}/"
    return path == ROOT or (bool(path) and "//" not in wrapped and "/./" not in wrapped and "/../" not in wrapped
                            and "\x00" not in path)


def parent_of(path: str) -> str:
    """The parent entry's path (``"."`` for a top-level entry)."""
    head, _, _ = path.rpartition("/")
    return head or ROOT


#: What a publish does with a symlink whose target leaves the tree: ``"as-is"`` (the default) records it, as
#: ``cp -a``, tar, restic and borg do; ``"contained"`` refuses the publish, naming every such link.
LinkPolicy = Literal["as-is", "contained"]
LINK_POLICIES: Final = ("as-is", "contained")


def check_symlink_target(path: str, target: object, *, where: str) -> str:
    """A link target is data, kept as it is (relative, absolute, dangling, leaving the tree): only a target
    ``symlink(2)`` could not have made (empty, NUL, not text) is refused.

    That is safe because nothing follows a link: the scan reads it with ``readlink`` through its directory's
    fd, and the restore creates every entry fd-relative with ``O_NOFOLLOW`` (an entry *under* a link is
    refused by :func:`check_tree_shape`), so a target is only ever written, never resolved.
    """
    if not isinstance(target, str) or not target or "\x00" in target:
        raise UnsafePathError(f"{where}: symlink {path!r} has an empty or NUL-bearing target {target!r}",
                              path=path)
    return target


def link_leaves_tree(path: str, target: str) -> bool:
    """Whether a link at ``path`` may resolve outside the tree, by a rule that is provably enough.

    Inside means: relative, with ``..`` only as leading components and no more of them than the link's
    own depth. A ``..`` after a name counts as leaving because that name may itself be a link (``L/..`` is
    not ``.`` when ``L`` points elsewhere); with that rule every inside link resolves inside, by induction.
    """
    if target.startswith("/"):
        return True
    depth = 0 if path == ROOT else path.count("/")
    parts = [part for part in target.split("/") if part not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    return ".." in parts[ups:] or ups > depth


def check_link_policy(links: object) -> LinkPolicy:
    """``links`` if it names a policy (:data:`LinkPolicy`); ``ValueError`` otherwise, before any work."""
    if links not in LINK_POLICIES:
        raise ValueError(f"links={links!r}: must be one of {', '.join(map(repr, LINK_POLICIES))}")
    return links  # narrowed by the membership test above


def check_links_contained(entries: Iterable[FileMeta], *, where: str) -> None:
    """The ``links="contained"`` policy: refuse a tree with any link that may leave it, naming all of them
    at once (``links``: their paths), so one attempt shows everything to fix."""
    leaving = [(e.path, e.target) for e in entries
               if e.kind == "symlink" and e.target is not None and link_leaves_tree(e.path, e.target)]
    if leaving:
        shown = "; ".join(f"{path!r} -> {target!r}" for path, target in leaving[:_SHOWN_LINKS])
        more = f"; and {len(leaving) - _SHOWN_LINKS} more" if len(leaving) > _SHOWN_LINKS else ""
        raise UnsafePathError(
            f"{where}: {len(leaving)} symlink(s) may resolve outside the tree, refused by links='contained' "
            f"(publish with links='as-is' to keep them as they are): {shown}{more}",
            path=leaving[0][0], links=[path for path, _ in leaving])


#: How many offending links the message names; the ``links`` field holds every one.
_SHOWN_LINKS: Final = 10


def check_artifact_name(name: object) -> str:
    """Artifact names become directory names in the store: a conservative charset, no dots first."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise UnsafePathError(
            f"artifact name {name!r} must match {_NAME_RE.pattern} (it names a directory in the store)",
            path=str(name))
    return name


def check_tree_shape(entries: Iterable[FileMeta], *, where: str) -> dict[str, FileMeta]:
    """Validate a whole tree: unique clean paths, a root dir, every parent a listed directory, every path no longer
    than a system call takes."""
    by_path: dict[str, FileMeta] = {}
    for entry in entries:
        path = entry.path
        if not (type(path) is str and _clean(path)):
            check_relpath(path, where=where)  # raises, naming what is wrong
        if path in by_path:
            raise UnsafePathError(f"{where}: duplicate path {path!r}", path=path)
        by_path[path] = entry
    root = by_path.get(ROOT)
    if root is None or root.kind != "dir":
        raise UnsafePathError(f"{where}: the tree has no root directory entry '.'", path=ROOT)
    for path, entry in by_path.items():
        if path == ROOT:
            continue
        parent = by_path.get(path.rpartition("/")[0] or ROOT)  # parent_of, inline: once per entry
        if parent is None or parent.kind != "dir":
            what = "missing" if parent is None else f"a {parent.kind}"
            raise UnsafePathError(
                f"{where}: {path!r} lies under {parent_of(path)!r}, which is {what}, not a directory",
                path=path)
        if len(path) > _SHORT:
            check_path_max(path, where=where)
        if entry.kind == "symlink":
            check_symlink_target(path, entry.target, where=where)
    return by_path

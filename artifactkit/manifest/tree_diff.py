"""Where two format-3 trees differ: only the directories whose objects' digests differ are read."""

from __future__ import annotations

from artifactkit.manifest.tree_read import Fetch, TreeRoot, Walk

#: ``(path, canonical line)`` of the entries read on one side.
Lines = list[tuple[str, str]]


def changed_region(a: TreeRoot, fetch_a: Fetch, b: TreeRoot, fetch_b: Fetch, *, where_a: str,
                   where_b: str) -> tuple[Lines, Lines]:
    """The entries of ``a`` and ``b`` in every directory whose object differs between them (a directory on one side
    only: all of its subtree), and the root's own entry where it differs; every object read is checked as a
    download checks it. What is in neither list is the same in both trees."""
    walk_a, walk_b = Walk(a, fetch_a, where_a, None), Walk(b, fetch_b, where_b, None)
    if a.root_line != b.root_line:
        walk_a.lines.append((".", a.root_line))
        walk_b.lines.append((".", b.root_line))
    pending: list[tuple[str, str | None, str | None]] = [(".", a.tree, b.tree)]
    while pending:
        directory, digest_a, digest_b = pending.pop()
        if digest_a == digest_b:
            continue  # the same object: the same subtree, unread
        if digest_a is None or digest_b is None:
            # A directory on one side only (its own entry was listed with its parent's): everything under it.
            walk, digest = (walk_b, digest_b) if digest_a is None else (walk_a, digest_a)
            assert digest is not None
            walk.subtree(directory, digest)
            continue
        subdirs_a = dict(walk_a.read_level([(directory, digest_a)], {}))
        subdirs_b = dict(walk_b.read_level([(directory, digest_b)], {}))
        pending.extend((path, subdirs_a.get(path), subdirs_b.get(path))
                       for path in sorted(subdirs_a.keys() | subdirs_b.keys(), reverse=True))
    return walk_a.lines, walk_b.lines

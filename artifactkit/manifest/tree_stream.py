"""A format-3 tree read an object at a time, in no set order: what ``verify`` and ``gc`` need of a version (the
objects it stands on and the entries each holds), in memory that does not grow with the tree (issue 52).

Every object goes through :class:`~artifactkit.manifest.tree_read.Walk`'s checks (its digest, its size and the
version's byte budget, its place, the order of its entries across a split directory's parts, its canonical bytes),
and a whole walk must find the counts the root states, as :func:`~artifactkit.manifest.tree_read.read_tree` does.
Only the order differs: depth first, a batch of :data:`~artifactkit.manifest.tree_read.FETCHED_AT_ONCE` objects at a
time (a bucket's requests for them overlap), each object's lines handed out and dropped before the next batch.

What a walk holds: the batch of objects being fetched (``at_once``, each at most the manifest limit; a writer's are
at most 1 MiB), one of them decoded, and the objects still to read (a digest and a path each): the subdirectories
and parts met and not yet entered, at most a batch's children for every level of the path being walked. A
self-reference cannot loop: an object stands for one path, and every subdirectory's path is longer than its
parent's (:class:`~artifactkit.manifest.tree_read.Walk` refuses a path past what a system call takes).
"""

from __future__ import annotations

from collections.abc import Iterator

from artifactkit.manifest.limits import show
from artifactkit.manifest.tree_read import (
    ENTRIES_KEYS,
    FETCHED_AT_ONCE,
    INDEX_KEYS,
    Fetch,
    TreeRoot,
    Walk,
    corrupt,
)

#: A directory's own object (an index or its entries), or one of a split directory's parts (``True``: its last).
_WHOLE = None


def tree_objects(root: TreeRoot, fetch: Fetch, *, where: str,
                 at_once: int = FETCHED_AT_ONCE) -> Iterator[tuple[str, int, list[tuple[str, str]]]]:
    """``(digest, size, entries)`` of each object of ``root``'s tree as it is read and checked: its entries as
    ``(path, canonical line)`` (none for a split directory's index); the root's own entry is not among them. The
    counts the root states are checked once the last object is out (:func:`~artifactkit.manifest.tree_read.corrupt`
    if the tree holds others). ``at_once``: objects fetched together (and held: a local disk gains nothing by more
    than one, a bucket's requests overlap), at most :data:`~artifactkit.manifest.tree_read.FETCHED_AT_ONCE`."""
    walk = Walk(root, fetch, where, None)
    pending: list[tuple[str, str, bool | None]] = [(".", root.tree, _WHOLE)]
    last: dict[str, str] = {}  # the last name so far of each split directory whose parts are being read
    entries = 1
    while pending:
        # The top of the stack, in the order it is popped: a split directory's parts come out in order.
        batch = [pending.pop() for _ in range(max(1, min(at_once, FETCHED_AT_ONCE, len(pending))))]
        checked = walk.objects([(directory, digest) for directory, digest, _ in batch])
        for (directory, digest, (doc, data)), (_, _, part) in zip(checked, batch, strict=True):
            if part is _WHOLE and set(doc) == INDEX_KEYS:
                parts = walk.index_parts(directory, digest, doc, data)
                pending.extend((directory, sha, at == len(parts) - 1) for at, sha in reversed(list(enumerate(parts))))
                yield digest, len(data), []
                continue
            if part is not _WHOLE and (set(doc) != ENTRIES_KEYS or not doc["entries"]):
                raise corrupt(f"{where}: tree object {digest}", f"a part of {show(directory)} must hold entries")
            subdirectories = walk.entries_of(directory, digest, doc, data, last)
            if part is not False:
                del last[directory]  # the directory is done: its last name is no longer needed
            lines, walk.lines = walk.lines, []
            entries += len(lines)
            pending.extend((path, sha, _WHOLE) for path, sha in reversed(subdirectories))
            yield digest, len(data), lines
    walk.check_counts(entries)

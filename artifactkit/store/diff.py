"""``diff``: what changed between two versions, field by field, reading only the directories that differ."""

from __future__ import annotations

from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.limits import decode_text
from artifactkit.manifest.parse import parse_entry
from artifactkit.manifest.tree_diff import Lines, changed_region
from artifactkit.metadata.compare import compare
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import FileMeta
from artifactkit.store.backend import Opened
from artifactkit.store.versions import version_tree


def diff_versions(opened: Opened, a: ArtifactRef, b: ArtifactRef) -> list[Mismatch]:
    """Every entry added (``unexpected``), removed (``missing``) and changed between ``a`` and ``b``, each changed
    field with both values (``expected`` is ``a``'s) and the shared assertion's diagnosis; in path order."""
    tree_a, tree_b = version_tree(opened, a), version_tree(opened, b)
    lines_a, lines_b = changed_region(tree_a.root, tree_a.fetch, tree_b.root, tree_b.fetch,
                                      where_a=f"manifest of {a}", where_b=f"manifest of {b}")
    return compare(_entries(lines_a, f"manifest of {a}"), _entries(lines_b, f"manifest of {b}"))


def _entries(lines: Lines, where: str) -> list[FileMeta]:
    """The entries of the lines read, each parsed as a format-2 manifest's entry is (a named error, never a bare
    ValueError, for a line a writer of the store forged)."""
    return [parse_entry(decode_text(line, where=where), where=where) for _, line in lines]

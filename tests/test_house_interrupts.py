"""A store operation's work directory is a ``PrivateDir`` (issue 53): marked as ours, removed within the cleanup's
bound however many Ctrl-Cs come, and swept after a kill. A ``tempfile`` directory is none of these: a killed bucket
publish left its ``TemporaryDirectory`` in the temp dir for good. The guard is a function the last test aims at a
broken module."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parent.parent / "artifactkit" / "store"
#: What makes a directory nobody sweeps.
TEMP_DIRS = {"TemporaryDirectory", "mkdtemp"}


def temp_dirs(root: Path) -> list[str]:
    """Every use of ``tempfile``'s directories under ``root``, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                    else node.name if isinstance(node, ast.alias) else None)
            if name in TEMP_DIRS:
                found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return found


def test_no_store_operation_makes_a_temp_dir_nobody_sweeps() -> None:
    assert (STORE / "s3" / "local_staging.py").is_file(), "the guard would pass vacuously"
    assert temp_dirs(STORE) == []


def test_the_guard_sees_a_temporary_directory_and_a_mkdtemp(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import tempfile\nwith tempfile.TemporaryDirectory() as d:\n    pass\n")
    (tmp_path / "b.py").write_text("from tempfile import mkdtemp\nmkdtemp()\n")
    assert temp_dirs(tmp_path) == ["a.py:2", "b.py:1", "b.py:2"]

"""The store's shape, checked: one ``Store`` class over a backend, and what is written once stays written once
(issue 24). Each guard is a function the tests below also aim at a broken module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "artifactkit"

#: Behaviour every backend shares, and the one function of the package that does it.
WRITTEN_ONCE = {"_resolve_in": "resolve a name to a version", "mark": "verify's and gc's read of every manifest",
                "claim_version": "the version-claim loop", "collect_garbage": "gc's sweep",
                "verify_store": "verify", "publish_tree": "publish's stages",
                "forget_versions": "forget's choice of versions"}


def _trees(root: Path) -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(root.rglob("*.py"))]


def definitions(root: Path, name: str) -> list[str]:
    """Where a function or method ``name`` is defined under ``root``, as ``file:line``."""
    return [f"{path.relative_to(root)}:{node.lineno}" for path, tree in _trees(root) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name]


def store_subclasses_and_new(root: Path) -> list[str]:
    """Every class deriving from ``Store``, and any ``__new__`` on ``Store`` itself."""
    found = []
    for path, tree in _trees(root):
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                     for base in node.bases}
            if "Store" in bases:
                found.append(f"{path.relative_to(root)}: class {node.name}(Store)")
            if node.name == "Store" and any(isinstance(item, ast.FunctionDef) and item.name == "__new__"
                                            for item in node.body):
                found.append(f"{path.relative_to(root)}: Store.__new__")
    return found


def test_store_is_one_class_with_no_new_and_no_subclass() -> None:
    assert definitions(PACKAGE, "publish"), "found no Store.publish: the guard would pass vacuously"
    assert store_subclasses_and_new(PACKAGE) == []
    assert store_subclasses_and_new(ROOT / "tests") == []


def test_what_every_backend_shares_is_defined_once() -> None:
    for name, what in WRITTEN_ONCE.items():
        assert len(definitions(PACKAGE, name)) == 1, f"{what} ({name}) is defined {definitions(PACKAGE, name)}"


def test_the_guards_see_a_subclass_a_new_and_a_second_definition(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Store:\n    def __new__(cls): ...\ndef mark(): ...\n")
    (tmp_path / "b.py").write_text("import a\nclass S3Store(a.Store): ...\ndef mark(): ...\n")
    assert store_subclasses_and_new(tmp_path) == ["a.py: Store.__new__", "b.py: class S3Store(Store)"]
    assert definitions(tmp_path, "mark") == ["a.py:3", "b.py:3"]


#: What ``import artifactkit.pytest_plugin`` may load of artifactkit: every pytest session of every project that
#: installs the package pays it, whether it uses a fixture or not (issue 24).
PLUGIN_MODULES_MAX = 10


def modules_loaded_by(statement: str) -> list[str]:
    """The artifactkit modules a fresh interpreter has loaded after ``statement``."""
    code = f"import sys\n{statement}\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'artifactkit'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded: list[str] = ast.literal_eval(done.stdout.strip())
    return loaded


def test_importing_the_pytest_plugin_loads_at_most_ten_artifactkit_modules() -> None:
    loaded = modules_loaded_by("import artifactkit.pytest_plugin")
    assert "artifactkit.pytest_plugin" in loaded
    assert len(loaded) <= PLUGIN_MODULES_MAX, loaded


def test_the_plugin_guard_counts_what_an_import_drags_in() -> None:
    assert len(modules_loaded_by("import artifactkit.store.store")) > PLUGIN_MODULES_MAX

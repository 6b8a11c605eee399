"""The shape of the house, checked: focused modules, one-way imports, a light public face, tests that
import no other test module. Each guard is a function the tests below also aim at a broken tree."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.support.graphs import cycles

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400
#: A string that names a module (``pkg.mod``), or an attribute of one (``pkg.mod:Class``).
_NAMED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:\w+)?")


def authored_python_files(root: Path = ROOT) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=root, capture_output=True, text=True, check=False)
    if listed.returncode == 0 and listed.stdout.strip():
        return [root / line for line in listed.stdout.splitlines() if (root / line).is_file()]
    return [p for d in ("artifactkit", "tests", "benches", "diagnostics") for p in (root / d).rglob("*.py")]


def oversized(files: list[Path], limit: int = LIMIT) -> dict[str, int]:
    """Files longer than ``limit`` lines, with their length."""
    return {p.name: n for p in files if (n := len(p.read_text().splitlines())) > limit}


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports: every import counts (function level, TYPE_CHECKING), and so
    does a string naming one of its modules (``importlib.import_module("pkg.mod")``, a ``"pkg.mod:Class"``
    registry entry): an import by name is still a dependency."""
    base = package.parent
    modules = {".".join(p.relative_to(base).with_suffix("").parts).removesuffix(".__init__"): p
               for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.fullmatch(node.value) \
                    and node.value.split(".")[0] == package.name:
                names = [node.value.partition(":")[0]]
            else:
                continue
            for imported in names:
                target = imported
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # a module importing its own package's __init__ is not an edge back up
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def test_no_authored_python_file_exceeds_400_lines() -> None:
    files = authored_python_files()
    assert len(files) > 50, "found too few source files: the guard would pass vacuously"
    assert oversized(files) == {}, "split these by responsibility"


def test_the_size_guard_fails_on_a_401_line_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    assert oversized([tmp_path / "long.py", tmp_path / "short.py"]) == {"long.py": LIMIT + 1}


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(ROOT / "artifactkit")
    assert len(graph) > 40
    assert cycles(graph) == []


def test_the_cycle_guard_sees_a_function_level_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\ny = 1\n")
    (pkg / "b.py").write_text("x = 1\ndef f():\n    from pkg.a import y\n    return y\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_the_cycle_guard_sees_a_cycle_through_a_module_named_in_a_string(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import importlib\nB = importlib.import_module('pkg.b')\n")
    (pkg / "b.py").write_text("REGISTRY = {'a': 'pkg.a:Thing'}\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_import_artifactkit_loads_no_machinery_and_the_public_names_resolve() -> None:
    code = ("import sys, artifactkit\n"
            "heavy = sorted(m for m in sys.modules if m.startswith(('multiprocessing', 'inotify_simple'))"
            " or m.startswith('artifactkit.'))\n"
            "print(heavy)\n"
            "from artifactkit import (Store, ArtifactRef, FileMeta, capture, capture_tree, compare,\n"
            "    assert_metadata_equal, materialize, probe_atime, private_noatime_tree, conformance)\n"
            "assert callable(conformance.check)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_test_module_imports_another_test_module_and_scripts_import_only_the_package_and_the_harness() -> None:
    # The scripts (benches/, diagnostics/) share the real-filesystem harness of tests/support/ with the tests, since
    # it left the wheel; no test module, and nothing else of tests/.
    scripts = [*(ROOT / "benches").glob("*.py"), *(ROOT / "diagnostics").glob("*.py")]
    offenders = []
    for path in [*(ROOT / "tests").rglob("*.py"), *scripts]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                leaf = name.rpartition(".")[2]
                outside_support = name != "tests.support" and not name.startswith("tests.support.")
                if name.startswith("tests") and (leaf.startswith("test_") or (path in scripts and outside_support)):
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert len(scripts) > 5 and offenders == []


def test_the_readme_is_short_and_links_into_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    linked = {line.split("](docs/")[1].split(")")[0].split("#")[0] for line in readme.splitlines() if "](docs/" in line}
    assert len(linked) >= 2 and all((ROOT / "docs" / name).is_file() for name in linked), linked


def test_the_test_extra_holds_only_what_the_tests_import_and_the_linters_are_in_dev() -> None:
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = {name: {re.split(r"[<>=\[ ]", req)[0] for req in reqs}
              for name, reqs in doc["project"]["optional-dependencies"].items()}
    assert extras["test"] == {"pytest", "pytest-xdist", "hypothesis", "pyfakefs"}
    assert {"mypy", "ruff"} <= extras["dev"]


def test_the_mit_license_ships_in_sdist_and_wheel() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")

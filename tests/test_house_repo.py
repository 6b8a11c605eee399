"""The repository by concept, checked: the wheel ships no test harness, the benchmark and evidence scripts stay
few, and every committed run a page or a test names is still there. Each guard is a function the tests below
also aim at a broken tree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The real-filesystem harness that left the package for tests/support/ (issue 51): never shipped again.
HARNESS = frozenset({"crash", "durability", "fault_workers", "fs_matrix", "mounts", "seaweedfs"})
#: A package by one of these names is a test harness, whatever it holds.
HARNESS_PACKAGES = frozenset({"testing", "tests", "support"})
SCRIPT_FOLDERS = ("benches", "diagnostics")
MAX_SCRIPTS = 15
#: A committed run named in prose or code (``results/<name>.json``; a glob such as ``bench-hold*.json``).
_RESULT = re.compile(r"results/([\w.*-]+\.(?:json|txt))")


def shipped_modules(pyproject: dict[str, Any], root: Path = ROOT) -> list[str]:
    """The modules the wheel ships: each listed package's own ``.py`` files (setuptools takes a package's files,
    not its subdirectories'), named as they are imported installed."""
    setuptools = pyproject["tool"]["setuptools"]
    packages = setuptools["packages"]
    assert isinstance(packages, list), "packages are listed by name: a `find` would have to be read here too"
    where = setuptools.get("package-dir", {})
    return [f"{package}.{path.stem}" for package in packages
            for path in sorted((root / where.get(package, package.replace(".", "/"))).glob("*.py"))]


def harness_shipped(modules: list[str]) -> list[str]:
    """The shipped modules that are a test harness: by the harness's module names, or a harness package."""
    return [m for m in modules if m.rpartition(".")[2] in HARNESS
            or HARNESS_PACKAGES & set(m.split(".")[:-1])]


def scripts(root: Path = ROOT) -> list[str]:
    """Every file of the benchmark and evidence folders but their committed runs (``results/``) and caches."""
    return sorted(str(p.relative_to(root)) for folder in SCRIPT_FOLDERS for p in (root / folder).rglob("*")
                  if p.is_file() and "results" not in p.relative_to(root / folder).parts
                  and "__pycache__" not in p.parts)


def missing_results(root: Path = ROOT) -> list[str]:
    """Committed runs that the README, a docs page or a test names and that are not in diagnostics/results/."""
    texts = [root / "README.md", *(root / "docs").glob("*.md"),
             *(p for p in (root / "tests").rglob("*.py") if p.name != Path(__file__).name)]  # not its own examples
    named = {name for path in texts for name in _RESULT.findall(path.read_text(encoding="utf-8"))}
    results = root / "diagnostics" / "results"
    return sorted(name for name in named if not list(results.glob(name)))


def test_the_wheel_ships_no_test_harness() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    modules = shipped_modules(pyproject)
    assert len(modules) > 40 and "artifactkit.store.store" in modules
    assert harness_shipped(modules) == []


def test_the_harness_guard_sees_a_harness_package_put_back(tmp_path: Path) -> None:
    for package, module in (("pkg", "model"), ("pkg/testing", "helpers"), ("pkg/store", "mounts")):
        (tmp_path / package).mkdir()
        (tmp_path / package / f"{module}.py").write_text("")
    pyproject = {"tool": {"setuptools": {"packages": ["pkg", "pkg.testing", "pkg.store"]}}}
    assert harness_shipped(shipped_modules(pyproject, tmp_path)) == ["pkg.testing.helpers", "pkg.store.mounts"]
    pyproject["tool"]["setuptools"]["packages"] = ["pkg"]
    assert harness_shipped(shipped_modules(pyproject, tmp_path)) == []


def test_at_most_15_scripts_live_in_the_benchmark_and_evidence_folders() -> None:
    found = scripts()
    assert "benches/store.py" in found and "diagnostics/ci_counts.py" in found
    assert len(found) <= MAX_SCRIPTS, found


def test_the_script_count_fails_on_a_16th_script_and_not_on_a_committed_run(tmp_path: Path) -> None:
    (tmp_path / "benches").mkdir()
    (tmp_path / "diagnostics" / "results").mkdir(parents=True)
    for n in range(MAX_SCRIPTS):
        (tmp_path / SCRIPT_FOLDERS[n % 2] / f"s{n}.py").write_text("")
    (tmp_path / "diagnostics" / "results" / "run.json").write_text("{}")
    assert len(scripts(tmp_path)) == MAX_SCRIPTS
    (tmp_path / "benches" / "kernel_bound.c").write_text("")
    assert len(scripts(tmp_path)) == MAX_SCRIPTS + 1


def test_every_committed_run_the_docs_and_tests_name_is_kept() -> None:
    assert missing_results() == []


def test_the_kept_runs_guard_sees_a_named_run_deleted(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "diagnostics" / "results").mkdir(parents=True)
    (tmp_path / "diagnostics" / "results" / "bench-hold.json").write_text("{}")
    (tmp_path / "README.md").write_text("evidence in `diagnostics/results/bench-hold*.json`\n")
    (tmp_path / "docs" / "a.md").write_text("runs `results/faults.json` and `results/bench-hold.json`\n")
    (tmp_path / "tests" / "test_x.py").write_text('PATH = "diagnostics/results/ci-run.json"\n')
    assert missing_results(tmp_path) == ["ci-run.json", "faults.json"]


def unlisted_packages(pyproject: dict[str, Any], root: Path = ROOT) -> list[str]:
    """Packages of ``artifactkit/`` (a folder with ``__init__.py``) that the wheel would leave out: setuptools takes
    the listed packages only, so a new room missing from the list installs editable and breaks in the wheel."""
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "artifactkit").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    return sorted(found - listed)


def test_every_package_of_artifactkit_is_in_the_wheel() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert unlisted_packages(pyproject) == []


def test_the_package_list_guard_sees_a_new_room_left_out(tmp_path: Path) -> None:
    (tmp_path / "artifactkit" / "room").mkdir(parents=True)
    (tmp_path / "artifactkit" / "__init__.py").write_text("")
    (tmp_path / "artifactkit" / "room" / "__init__.py").write_text("")
    pyproject = {"tool": {"setuptools": {"packages": ["artifactkit"]}}}
    assert unlisted_packages(pyproject, tmp_path) == ["artifactkit.room"]


#: README + docs (issue 51): what a newcomer reads stays brief.
MAX_DOC_WORDS = 25_000


def doc_words(root: Path = ROOT) -> int:
    """Words of README.md and docs/*.md as ``cat README.md docs/*.md | wc -w`` counts them."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return sum(len(page.read_text(encoding="utf-8").split()) for page in pages)


def test_readme_and_docs_stay_within_their_word_budget() -> None:
    assert doc_words() <= MAX_DOC_WORDS


def test_the_word_budget_guard_counts_every_page(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("one two\n")
    (tmp_path / "docs" / "a.md").write_text("three\nfour five\n")
    (tmp_path / "docs" / "b.md").write_text("word " * MAX_DOC_WORDS)
    assert doc_words(tmp_path) == 5 + MAX_DOC_WORDS > MAX_DOC_WORDS

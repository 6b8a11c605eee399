"""The numbers the docs state are the output of the scripts that measure them (issue 26): the CI counts in
docs/testing.md are diagnostics/ci_counts.py's rendering of its committed evidence, the tables of
docs/performance.md bench_store.py's rendering of its committed run, and the README states none."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _ci_counts() -> ModuleType:
    return _diagnostics("ci_counts")


def _diagnostics(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "diagnostics"))  # the scripts import their siblings (docs_tables, ...)
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "diagnostics" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "diagnostics"))


def _block(page: Path, name: str) -> str:
    text = page.read_text(encoding="utf-8")
    return text.split(f"<!-- generated:{name} -->\n", 1)[1].split(f"\n<!-- /generated:{name} -->", 1)[0]


def test_the_ci_counts_in_docs_are_the_rendering_of_the_committed_evidence() -> None:
    doc = json.loads((ROOT / "diagnostics" / "results" / "ci-run.json").read_text(encoding="utf-8"))
    assert doc["schema"] == "artifactkit.ci-run/1" and len(doc["runs"]) == 3
    assert _block(ROOT / "docs" / "testing.md", "ci-run") == _ci_counts().table(doc).strip()


def test_the_performance_tables_in_docs_are_the_rendering_of_the_committed_run() -> None:
    # Until the run is committed every block must be the placeholder: a figure typed in by hand fails either way.
    tables = _diagnostics("bench_tables")
    evidence = ROOT / tables.EVIDENCE
    doc = json.loads(evidence.read_text(encoding="utf-8")) if evidence.exists() else None
    for name, text in tables.render_blocks(doc).items():
        assert _block(ROOT / "docs" / "performance.md", name) == text.strip(), name


def test_the_renames_table_in_docs_is_the_rendering_of_the_committed_run() -> None:
    doc = json.loads((ROOT / "diagnostics" / "results" / "bench-renames-issue28.json").read_text(encoding="utf-8"))
    assert doc["schema"] == "artifactkit-bench-renames/1" and doc["command"].startswith("python3 diagnostics/")
    module = _diagnostics("bench_renames")
    assert _block(ROOT / "docs" / "performance.md", "bench-renames") == module.table(doc)
    # What the prose beside the table says of it: every two-mover row beats every one-mover row, and only
    # movers renaming within a directory each (staged in place) are twice as fast as one process renaming.
    movers = {name: processes for name, processes, *_ in module.VARIANTS}
    layouts = {name: layout for name, _, _, layout in module.VARIANTS}
    rows = doc["results"]
    assert max(r["median_ms"] for n, r in rows.items() if movers[n] == 2) < min(
        r["median_ms"] for n, r in rows.items() if movers[n] == 1)
    twice = {n for n, r in rows.items() if r["speedup_over_one_rename_paired"] >= 2}
    assert twice == {n for n in rows if layouts[n] == "in-place-sharded"}
    assert list(rows)[-2:] == sorted(twice, key=list(rows).index)  # "the last two" rows of the table


def test_the_readme_states_no_test_count_of_its_own() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\d+ (passed|skipped)", readme)


def test_the_log_parser_takes_each_sections_summary_and_skip_reasons() -> None:
    log = ("== ruff\nAll checks passed!\n== pytest as root (the matrix)\n"
           "SKIPPED [2] tests/x.py:3: needs fanotify: refused here\n"
           "====== 10 passed, 2 skipped in 12.50s ======\n== pytest as akci\n"
           "===== 1 failed, 7 passed, 1 xfailed in 3.00s =====\n")
    runs = _ci_counts().parse(log)
    assert [(run["run"], run["counts"], run["seconds"]) for run in runs] == [
        ("pytest as root (the matrix)", {"passed": 10, "skipped": 2}, 12.5),
        ("pytest as akci", {"failed": 1, "passed": 7, "xfailed": 1}, 3.0)]
    assert runs[0]["skips"] == {"needs fanotify: refused here": 2}

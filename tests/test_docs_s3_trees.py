"""The bucket store's tree benchmark (issue 52, item 6): the table in docs/s3.md is ``benches/s3.py --trees``'s
rendering of its committed run, made by committed code, and the run shows what the table says: the diff named exactly
the 10 changed files, ``--path`` brought back one directory, the re-publish stored at most 1 MiB outside the blobs."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "diagnostics" / "results" / "bench-s3-trees-100k.json"


def _block(page: Path, name: str) -> str:
    text = page.read_text(encoding="utf-8")
    return text.split(f"<!-- generated:{name} -->\n", 1)[1].split(f"\n<!-- /generated:{name} -->", 1)[0]


def _run() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(EVIDENCE.read_text(encoding="utf-8"))
    return doc


def test_the_s3_trees_table_in_docs_is_the_rendering_of_the_committed_run() -> None:
    # benches/ runs from the repository root (python -m), which pytest puts on sys.path.
    bench = importlib.import_module("benches.s3")
    doc = _run()
    assert doc["schema"] == bench.TREES_SCHEMA and doc["command"].startswith("python -m benches.s3 --trees")
    assert doc["code"]["artifactkit_changes_uncommitted"] == []
    assert _block(ROOT / "docs" / "s3.md", "bench-s3-trees") == bench.render_trees(doc)


def test_the_s3_trees_run_shows_what_its_table_says() -> None:
    doc = _run()
    shape, trees = doc["shape"], doc["results"]["trees"]
    assert shape == {"files": 100_000, "bytes_per_file": 256, "dirs": 1_000}
    assert len(trees["changed_files"]) == 10 and trees["diff"]["paths"] == sorted(trees["changed_files"])
    assert trees["download_path_files"] == shape["files"] // shape["dirs"]
    assert trees["republish_bytes_outside_blobs"] <= 1 << 20

"""The tree corpus: declarative, shipped in the wheel, materialized exactly as supplied."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from artifactkit import TimestampNotRepresentable, UnsafePathError, assert_metadata_equal
from artifactkit.conformance.corpus import corpus_names, load_tree, materialize, needs_root, parse_tree
from artifactkit.engine.reference.scan import capture_tree
from tests.support.capability import require_reading_unreadable_files

ROOT = Path(__file__).resolve().parents[2]


def test_the_corpus_holds_every_tree_the_issues_name() -> None:
    assert {"basic", "edge-times", "links", "special-modes", "names", "wide"} <= set(corpus_names())
    assert len(load_tree("wide").entries) == 1002


@pytest.mark.parametrize("name", corpus_names())
def test_materialize_builds_exactly_what_the_tree_supplies(fast_tmp: Path, name: str) -> None:
    if needs_root(name):
        require_reading_unreadable_files()
    supplied = materialize(name, fast_tmp / name)
    assert_metadata_equal(supplied, capture_tree(fast_tmp / name), stage="materialize")


def test_an_unknown_tree_names_the_bundled_ones() -> None:
    with pytest.raises(LookupError, match="basic"):
        load_tree("no-such-tree")


def test_a_tree_with_an_escaping_path_is_refused() -> None:
    with pytest.raises(UnsafePathError):
        parse_tree("bad", {"entry": [{"path": ".", "kind": "dir", "mode": 0o755, "mtime_ns": 0, "atime_ns": 0},
                                     {"path": "../x", "kind": "dir", "mode": 0o755, "mtime_ns": 0, "atime_ns": 0}]})


def test_materialize_reads_every_time_back_and_refuses_a_coarse_filesystem(ext4_whole_seconds: Path) -> None:
    with pytest.raises(TimestampNotRepresentable):
        materialize("basic", ext4_whole_seconds / "corpus-basic")


def _checkout_state() -> tuple[frozenset[str], int | None]:
    """What a build in the checkout would change: its top-level names (``build/``) and the core cargo built."""
    core = ROOT / "target" / "release" / "lib_native.so"
    return frozenset(p.name for p in ROOT.iterdir()), core.stat().st_mtime_ns if core.exists() else None


def test_the_wheel_ships_every_corpus_tree(tmp_path: Path) -> None:
    # Built from a copy of the source, with no cargo on PATH: the fixtures are package data, the same in
    # the pure wheel, and a build in the checkout made its build/ and rebuilt its target/ (24 s of cargo in the
    # suite). CI builds and tests the native wheel on its own (.ci/run).
    source = tmp_path / "source"
    # Not `git ls-files`: CI's unprivileged run has a copy without .git. What no build needs: VCS, venvs, caches,
    # cargo's target and any built core (its absence is what the wheel is checked for below).
    skipped = shutil.ignore_patterns(".git", ".venv*", "target", "build", "dist", "*.egg-info", "__pycache__",
                                     ".*_cache", ".hypothesis", "_native*.so")
    shutil.copytree(ROOT, source, ignore=skipped, symlinks=True)
    no_cargo = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                               if d and not os.path.exists(os.path.join(d, "cargo")))
    before = _checkout_state()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, env={**os.environ, "PATH": no_cargo})
    assert _checkout_state() == before, "building the wheel changed the checkout"
    names = zipfile.ZipFile(next(tmp_path.glob("artifactkit-*.whl"))).namelist()
    assert not [n for n in names if n.endswith(".so")], "a native build ran: cargo was found"
    shipped = {n for n in names if n.startswith("artifactkit/fixtures/")}
    assert {f"artifactkit/fixtures/{name}.toml" for name in corpus_names()} <= shipped

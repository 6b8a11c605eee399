"""Measure what the strict ``noatime_tree`` fixture costs per test over plain ``tmp_path``.

Paired pytest runs of N trivial tests each way (alternating, so drift hits both), median of
several rounds; plus the session probe's cost and one tree's setup+teardown measured in-process.
Prints one JSON document and writes diagnostics/results/bench-fixture.json (no absolute paths).

    python diagnostics/bench_fixture.py [--tests 200] [--rounds 5] [--base DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from artifactkit.isolation.probe import probe_atime
from artifactkit.isolation.tree import private_noatime_tree

RESULTS = Path(__file__).resolve().parent / "results" / "bench-fixture.json"
PYTEST_ARGS = ["-q", "-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:randomly"]


def _write_project(root: Path, count: int) -> None:
    for fixture in ("tmp_path", "noatime_tree"):
        body = "".join(f"def test_{i}({fixture}):\n    assert {fixture}.is_dir()\n\n" for i in range(count))
        (root / f"test_{fixture}.py").write_text(body)
    (root / "pytest.ini").write_text("[pytest]\n")


def _run(root: Path, fixture: str, extra: list[str]) -> int:
    start = time.perf_counter_ns()
    result = subprocess.run([sys.executable, "-m", "pytest", *PYTEST_ARGS, *extra, f"test_{fixture}.py"],
                            cwd=root, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter_ns() - start
    if result.returncode != 0:
        raise SystemExit(f"pytest run for {fixture} failed:\n{result.stdout[-2000:]}")
    return elapsed


def _in_process(base: str, repeats: int) -> dict[str, int]:
    probes, trees = [], []
    probe = probe_atime(base)
    for _ in range(repeats):
        start = time.perf_counter_ns()
        probe_atime(base)
        probes.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        with private_noatime_tree(base, probe=probe):
            pass
        trees.append(time.perf_counter_ns() - start)
    return {"probe_median_ns": int(statistics.median(probes)), "tree_median_ns": int(statistics.median(trees))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200, help="trivial tests per run (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="paired runs; the median is reported")
    parser.add_argument("--base", help="pass --artifactkit-base=DIR (default: pytest's basetemp)")
    args = parser.parse_args(argv)
    extra = [f"--artifactkit-base={args.base}"] if args.base else []
    project = Path(tempfile.mkdtemp(prefix="artifactkit-bench-"))
    try:
        _write_project(project, args.tests)
        runs: dict[str, list[int]] = {"tmp_path": [], "noatime_tree": []}
        for _ in range(args.rounds):
            for fixture, times in runs.items():
                times.append(_run(project, fixture, extra))
        probe_base = args.base or tempfile.gettempdir()
        probe = probe_atime(probe_base)
        inproc = _in_process(probe_base, 200)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    medians = {name: int(statistics.median(times)) for name, times in runs.items()}
    doc = {
        "schema": "artifactkit.bench-fixture/1",
        "command": "python diagnostics/bench_fixture.py " + " ".join(
            f"--{k} {v}" for k, v in (("tests", args.tests), ("rounds", args.rounds)))
            + (" --base <DIR>" if args.base else ""),
        "environment": {"kernel": platform.release(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "fs_type": probe.fs_type, "atime_policy": probe.atime_policy,
                        "base": "--artifactkit-base" if args.base else "pytest basetemp (default)"},
        "tests_per_run": args.tests,
        "rounds": args.rounds,
        "run_ns": runs,
        "run_median_ns": medians,
        "overhead_per_test_ns": (medians["noatime_tree"] - medians["tmp_path"]) // args.tests,
        "in_process": inproc,
    }
    print(json.dumps(doc, indent=2, sort_keys=True))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

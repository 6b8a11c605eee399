"""Two revisions of the store, paired: which is faster, per corpus and thread count, in fresh processes.

    python3 diagnostics/bench_core_ab.py --base REV [--candidate REV] --output FILE.json
    python3 diagnostics/bench_core_ab.py --base 775c041 --candidate a364e79 \\
        --output diagnostics/results/bench-core-ab-chain.json
    python3 diagnostics/bench_core_ab.py --table-from diagnostics/results/bench-core-ab-chain.json
    python3 diagnostics/bench_core_ab.py --table-from diagnostics/results/bench-core-ab-sharded-blobs.json \\
        --moves --block bench-core-ab-sharded-blobs

``bench_store.py`` measures one build against the peers; a change to the core is judged against the core
before it, and two runs of that script an hour apart differ by 10-30 % here. So this builds both revisions
(each its own ``artifactkit/`` package and its own core, ``cargo build --release`` into a private target, the
same flags for both) and alternates them round by round (AB, BA, ...) on a tmpfs: each round a fresh child
(``bench_child.py``, its imports off the clock) publishes then downloads the corpus (``roundtrip``) under
``taskset`` of as many CPUs as threads, on the native engine. The child imports the revision's package from
``PYTHONPATH`` (checked). Reported per cell: each side's median wall and CPU time and the wall time inside
each core function (``bench_child.time_the_core``), and the median of per-round ratios base / candidate
(above 1: the candidate is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

from bench_corpus import CORPORA, build_corpus
from bench_env import child_env, command_line, environment, tmpfs_base
from bench_rounds import Cell, run_child
from docs_tables import rerender, write_table

SCHEMA: Final = "artifactkit.bench-core-ab/1"
ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The figures compared for each side (a core function's are added as the child reports them).
FIGURES: Final = ("ns", "cpu_ns")
#: The rows of the docs' table (every figure is in the evidence): the whole, and the two threaded calls.
SHOWN: Final = {"ns": "round trip (wall)", "cpu_ns": "round trip (CPU)", "core:stage_captured": "in stage_captured",
                "core:create_files": "in create_files"}
#: The moves' row, for a change to them: a core function's time summed over the threads calling it.
MOVES: Final = {"core:rename_staged": "in rename_staged (summed over its threads)"}
PAGE: Final = "performance.md"
BLOCK: Final = "bench-core-ab"


def _git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def build(rev: str, into: str) -> dict[str, str]:
    """``rev``'s package with its core, built by cargo, in ``into/artifactkit``; what was built."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = os.path.join(into, "tree")
    _git("worktree", "add", "--detach", "--quiet", tree, commit)
    try:
        target = os.path.join(into, "target")
        subprocess.run(["cargo", "build", "--release", "--quiet", "--lib"], cwd=tree, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": target})
        shutil.copytree(os.path.join(tree, "artifactkit"), os.path.join(into, "artifactkit"),
                        ignore=shutil.ignore_patterns("__pycache__", "_native*.so"))
        shutil.copy2(os.path.join(target, "release", "lib_native.so"),
                     os.path.join(into, "artifactkit", "_native.abi3.so"))
    finally:
        _git("worktree", "remove", "--force", tree)
    return {"rev": rev, "commit": commit, "subject": _git("log", "-1", "--format=%s", commit)}


def check_imports(side: str) -> None:
    """A child given ``side`` imports the package there, not an installed one."""
    # Run from the side's directory: `python -c` puts the working directory first on sys.path.
    probe = "import artifactkit, sys; sys.stdout.write(artifactkit.__file__)"
    where = subprocess.run([sys.executable, "-c", probe], env={**child_env("native"), "PYTHONPATH": side},
                           cwd=side, capture_output=True, text=True, check=True).stdout
    if not where.startswith(side + os.sep):
        raise SystemExit(f"PYTHONPATH={side} imported artifactkit from {where}: an install shadows it")


def run_round(side: str, corpus_src: str, base: str, threads: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(dir=base)
    task = {"src": corpus_src, "dest": os.path.join(work, "dest"), "store": os.path.join(work, "store"),
            "workers": threads}
    try:
        got = run_child(Cell(os.path.basename(side), "roundtrip", "native", threads, threads), task, package=side)
    finally:
        shutil.rmtree(work)
    figures = {name: got[name] for name in FIGURES}
    figures.update({f"core:{name}": spent["ns"] for name, spent in got.get("core", {}).items()})
    return {"figures": figures, "digest": got["digest"]}


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    names = sorted(set(rounds[0]["base"]["figures"]) & set(rounds[0]["candidate"]["figures"]))
    out: dict[str, Any] = {}
    for name in names:
        pairs = [(r["base"]["figures"][name], r["candidate"]["figures"][name]) for r in rounds]
        out[name] = {"base_ms": round(statistics.median(b for b, _ in pairs) / 1e6, 3),
                     "candidate_ms": round(statistics.median(c for _, c in pairs) / 1e6, 3),
                     "base_over_candidate": round(statistics.median(b / c for b, c in pairs if c), 3)}
    return out


def render(doc: dict[str, Any], *, moves: bool = False) -> str:
    """The docs' table of a run; ``moves``: with the time in ``rename_staged`` (a publish's moves into ``blobs/``)."""
    shown = {**SHOWN, **MOVES} if moves else SHOWN
    lines = [f"Base `{doc['base']['commit'][:10]}`, candidate `{doc['candidate']['commit'][:10]}` "
             f"({doc['candidate']['subject']}); {doc['environment']['cpu']['model']}, "
             f"{doc['environment']['nproc']} CPUs; {doc['rounds']} paired rounds. Command: `{doc['command']}`", "",
             "| corpus | threads | figure | base ms | candidate ms | base / candidate (paired median) |",
             "|---|---|---|---|---|---|"]
    for cell in doc["cells"]:
        for name, label in shown.items():
            row = cell["summary"][name]
            lines.append(f"| {cell['corpus']} | {cell['threads']} | {label} | {row['base_ms']} | "
                         f"{row['candidate_ms']} | {row['base_over_candidate']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-from", metavar="FILE", help="print a kept run's table, write it into the docs")
    parser.add_argument("--base", help="the revision compared against (git rev)")
    parser.add_argument("--candidate", default="HEAD", help="the revision measured (default HEAD: commit first)")
    parser.add_argument("--corpus", action="append", choices=("small", "many"), help="default: small and many")
    parser.add_argument("--threads", type=int, action="append", help="default: 1 and every core")
    parser.add_argument("--rounds", type=int, default=12, help="paired rounds per cell (default 12)")
    parser.add_argument("--output")
    parser.add_argument("--no-docs", action="store_true", help="do not write the table into docs/performance.md")
    parser.add_argument("--block", default=BLOCK, help=f"the docs' block the table goes in (default {BLOCK})")
    parser.add_argument("--moves", action="store_true", help="show the time in rename_staged too")
    args = parser.parse_args(argv)
    if args.table_from:
        return rerender(args.table_from, lambda doc: render(doc, moves=args.moves), PAGE, args.block)
    if not (args.base and args.output):
        raise SystemExit("--base REV and --output FILE are required for a run")
    if shutil.which("cargo") is None:
        raise SystemExit("needs cargo: both revisions' cores are built here")
    started = time.monotonic()
    cells: list[dict[str, Any]] = []
    with tmpfs_base() as (tmpfs, note), tempfile.TemporaryDirectory() as builds:
        sides = {side: os.path.join(builds, side) for side in ("base", "candidate")}
        built = {side: build(getattr(args, side), path) for side, path in sides.items()}
        for path in sides.values():
            check_imports(path)
        for corpus in args.corpus or ["small", "many"]:
            src = os.path.join(tmpfs, f"src-{corpus}")
            build_corpus(src, corpus, *CORPORA[corpus])
            for threads in args.threads or sorted({1, os.cpu_count() or 1}):
                print(f"[{time.monotonic() - started:5.0f}s] {corpus}, {threads} threads", file=sys.stderr)
                for side in sides.values():  # a warm-up each (bytecode written, page cache warm), untimed
                    run_round(side, src, tmpfs, threads)
                rounds = []
                for k in range(args.rounds):
                    order = ("base", "candidate") if k % 2 == 0 else ("candidate", "base")
                    rounds.append({side: run_round(sides[side], src, tmpfs, threads) for side in order})
                digests = {r[s]["digest"] for r in rounds for s in sides}
                if len(digests) != 1:
                    raise SystemExit(f"{corpus}: the two revisions published different manifests: {sorted(digests)}")
                cells.append({"corpus": corpus, "threads": threads, "summary": summarize(rounds), "rounds": rounds})
            shutil.rmtree(src)
        env = environment(tmpfs, note)
    doc = {"schema": SCHEMA, "command": command_line(sys.argv[1:] if argv is None else argv, "bench_core_ab.py"),
           "rounds": args.rounds, "base": built["base"], "candidate": built["candidate"], "environment": env,
           "method": __doc__.split("\n\n", 2)[2].strip(), "duration_s": round(time.monotonic() - started, 1),
           "cells": cells}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(render(doc, moves=args.moves))
    if not args.no_docs:
        write_table(PAGE, args.block, render(doc, moves=args.moves))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The store's benchmark (issue 28): both engines against the tools users would otherwise pick, in one run.

    python3 diagnostics/bench_store.py --output diagnostics/results/bench-store-issue28.json
    python3 diagnostics/bench_store.py --quick --output /tmp/bench-quick.json       # a smoke run, seconds
    python3 diagnostics/bench_store.py --table-from diagnostics/results/bench-store-issue28.json

On a tmpfs (mounted here when root), warm page cache, paired rounds of fresh child processes: the native
core at 1 and at every core's threads (``ARTIFACTKIT_ENGINE=native``, ``workers=N``, under ``taskset`` of N
CPUs) and the reference (``ARTIFACTKIT_ENGINE=python``, one process, one CPU) publish, download (verified,
exact) and round-trip ``small`` (128 x 16 KiB in 4 dirs) and ``many`` (10,000 x 1 KiB in 100 dirs); ``cp -a``,
``rsync -a --atimes`` and ``shutil.copytree`` copy the same tree under the same CPU sets. Every ratio is the
median of per-round ratios to the ``cp -a`` of the same round and CPU set (wall and CPU time). ``large`` (one
256 MiB file): publish and download against ``hashlib.sha256`` over the same bytes. Then ``strace -f -c`` of
one publish and one download of ``many`` per engine (syscalls per file), a cProfile of the native publish and
download, and the scale run (100,000 x 256 B by whole CLI processes, wall time and peak RSS, against ``cp
-a``). Each child records the engine the library says it uses (a mismatch ends the run), its CPU time
(user and system, which other load inflates less than the wall clock) and, on the native engine, the wall
time inside the core. The tables, the acceptance verdicts and the extrapolation are derived from the raw
results; ``--table-from`` re-renders kept evidence and writes the tables into ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

from bench_acceptance import acceptance
from bench_corpus import CORPORA, QUICK_CORPORA, SCALE_FILES, SCALE_FILES_QUICK
from bench_env import command_line, environment, page_reporting, tmpfs_base
from bench_kernel_bound import compile_bound
from bench_rounds import Bench, bench_corpus, setups
from bench_scale import bench_scale
from bench_syscalls import syscalls
from bench_tables import PAGE, render_all, render_blocks
from docs_tables import write_table

SCHEMA: Final = "artifactkit.bench-store/3"
REQUIRED_TOOLS: Final = ("cp", "rsync", "taskset", "/usr/bin/time")


def _check_tools() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"needs {', '.join(missing)} (the peers and the conditions every child runs under)")
    probe = "from artifactkit.store.engines import native_available; print(native_available())"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "ARTIFACTKIT_ENGINE": "native"},
                          capture_output=True, text=True, check=False)
    if done.stdout.strip() != "True":
        raise SystemExit("the native core is not built here (pip install -e . with cargo on PATH): the benchmark "
                         "compares it with the reference")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=False, help="the evidence JSON to write")
    parser.add_argument("--table-from", metavar="FILE", help="print a kept run's tables, write them into the docs")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: small corpora, 2 rounds, 2,000 scale files, docs untouched")
    parser.add_argument("--rounds", type=int, help="paired rounds per corpus (default 7; --quick 2)")
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these (repeatable)")
    parser.add_argument("--threads", type=int, action="append",
                        help="native thread counts, each under as many CPUs (repeatable; default 1 and every core)")
    parser.add_argument("--scale-files", type=int, help=f"files of the scale run (default {SCALE_FILES:,}; "
                        f"--quick {SCALE_FILES_QUICK:,}); 0 skips it")
    parser.add_argument("--scale-rounds", type=int, help="rounds of the scale run (default 3; --quick 1)")
    parser.add_argument("--source-atime", choices=("settled", "as-given"), default="settled",
                        help="settled (default): the atimes the untimed warm-up left, cp -a's cheapest case; "
                             "as-given: the corpus's historical atimes put back before every run")
    parser.add_argument("--no-docs", action="store_true", help="do not write the tables into docs/performance.md")
    return parser


def write_docs(doc: dict[str, Any]) -> None:
    for name, text in render_blocks(doc).items():
        write_table(PAGE, name, text)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.table_from:
        with open(args.table_from, encoding="utf-8") as handle:
            kept = json.load(handle)
        if kept.get("schema") != SCHEMA:  # older runs: their own tables, printed only
            from bench_tables_v2 import render_tables  # noqa: PLC0415

            print(render_tables(kept))
            return 0
        print(render_all(kept))
        if not args.no_docs:
            write_docs(kept)
        return 0
    if not args.output:
        raise SystemExit("--output FILE is required for a run (quick runs: a path under /tmp)")
    _check_tools()
    shapes = QUICK_CORPORA if args.quick else CORPORA
    rounds = args.rounds or (2 if args.quick else 7)
    scale_files = args.scale_files if args.scale_files is not None else SCALE_FILES_QUICK if args.quick else SCALE_FILES
    scale_rounds = args.scale_rounds or (1 if args.quick else 3)
    cores = os.cpu_count() or 1
    chosen = setups(args.threads or sorted({1, cores}))
    if max(s.cores for s in chosen) > cores:
        raise SystemExit(f"--threads above this machine's {cores} cores")
    default = max((s for s in chosen if s.engine == "native"), key=lambda s: s.threads)
    started, load_before, reporting_before = time.monotonic(), os.getloadavg(), page_reporting()

    def say(what: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {what}", file=sys.stderr)

    results: dict[str, Any] = {}
    found: dict[str, Any] | None = None
    scale: dict[str, Any] | None = None
    with tmpfs_base() as (tmpfs, note), tempfile.TemporaryDirectory() as build:
        base = tempfile.mkdtemp(prefix="ak-bench-", dir=tmpfs)
        # The calls alone (kernel_bound.c), peers of every round where a C compiler is: else those cells are left out.
        kernel_bound, compiler = compile_bound(build) if shutil.which("gcc") else (None, None)
        try:
            for name in args.corpus or list(shapes):
                say(f"{name}: building, then {rounds} rounds")
                bench = Bench(base, name, shapes[name], source_atime=args.source_atime, kernel_bound=kernel_bound)
                try:
                    profile = default if name == "many" else None
                    results[name] = bench_corpus(bench, chosen, rounds, profile=profile)
                    if name == "many":
                        say("many: strace -f -c per engine")
                        found = syscalls(bench, chosen, base)
                finally:
                    bench.close()
            if scale_files:
                say(f"scale: {scale_files:,} files, {scale_rounds} rounds + a warm-up, CLI on {default.cores} CPUs")
                scale = bench_scale(base, scale_files, scale_rounds, default.cores, default.engine)
            env = environment(tmpfs, note)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    doc: dict[str, Any] = {
        "schema": SCHEMA, "command": command_line(sys.argv[1:] if argv is None else argv), "quick": args.quick,
        "rounds": rounds, "environment": env, "source_atime": args.source_atime,
        "setups": [s._asdict() for s in chosen], "method": __doc__.split("\n\n", 2)[2].strip(),
        "duration_s": round(time.monotonic() - started, 1),
        "loadavg_1_5_15": {"before": [round(x, 2) for x in load_before],
                           "after": [round(x, 2) for x in os.getloadavg()]},
        "page_reporting": {"before": reporting_before, "after": page_reporting()},
        "results": results, "syscalls": found, "scale": scale, "calls_compiler": compiler}
    doc["acceptance"] = acceptance(doc)  # kept in the evidence too; --table-from re-derives it
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    # Rendered from the evidence as written (sort_keys reorders its dicts), so the docs this run writes are
    # exactly what --table-from renders and tests/test_docs_numbers.py checks.
    with open(args.output, encoding="utf-8") as handle:
        kept = json.load(handle)
    print(render_all(kept))
    if not (args.quick or args.no_docs):
        write_docs(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The store's benchmark (issue 28): both engines against the tools users would otherwise pick, in one run.

    python -m benches.store --output diagnostics/results/bench-store-issue28.json      (from the repository root)
    python -m benches.store --quick --output /tmp/bench-quick.json       # a smoke run, seconds
    python -m benches.store --table-from diagnostics/results/bench-store-issue28.json
    python -m benches.store --scale-only --engine python [--scale-files 100000] [--scale-rounds 3] --output F.json

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

The scale run: each run is the console script (``artifactkit publish`` / ``artifactkit download``, or ``python -m
artifactkit.cli`` where no script is installed) under ``taskset`` (all the CPUs the setup uses) and GNU
``time``, whose own process is tiny and fresh, so its ``%M`` is the CLI's peak RSS alone (``ru_maxrss`` of
a child forked from this big parent would start at the parent's). The wall time is this parent's clock
around the whole process: interpreter start, imports, the operation, exit. A round: a publish into a fresh
store, a download of that version into a fresh destination, and two ``cp -a``: one with the source alone resident,
the publish's peer, and one beside the store, the download's (odd rounds: each copy before its operation; even
rounds: after); one untimed warm-up round first. The issue's figures for the code before it are kept as
:data:`TODAY`, the baseline the acceptance halves. ``--scale-only`` runs it alone, on either engine.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from benches.env import (
    CORPORA,
    QUICK_CORPORA,
    SCALE_FILES,
    SCALE_FILES_QUICK,
    build_corpus,
    child_env,
    command_line,
    cpu_set,
    environment,
    page_reporting,
    reset_source_atimes,
    scale_shape,
    tmpfs_base,
)
from benches.kernel_bound import compile_bound
from benches.report import PAGE, acceptance, render_all, render_blocks
from benches.rounds import Bench, bench_corpus, setups, syscalls
from diagnostics.docs_tables import write_table

SCHEMA: Final = "artifactkit.bench-store/3"
REQUIRED_TOOLS: Final = ("cp", "rsync", "taskset", "/usr/bin/time")
#: Issue 28's "today" (before the native core): whole CLI processes on the tmpfs of the machine it was filed on.
TODAY: Final = {"publish": {"wall_s": 6.0, "peak_rss_mb": 223}, "download": {"wall_s": 4.8, "peak_rss_mb": 168},
                "cp_a": {"wall_s": 3.8}}
OPS: Final = ("publish", "download", "cp_a", "cp_a_beside_store")


def cli_command() -> list[str]:
    """The console script installed beside this interpreter, else the CLI as a module."""
    script = os.path.join(os.path.dirname(sys.executable), "artifactkit")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "artifactkit.cli"]


def timed_cli(cmd: list[str], cores: int, env: dict[str, str], rss_file: str) -> dict[str, Any]:
    full = [*cpu_set(cores), "/usr/bin/time", "-f", "%M %U %S", "-o", rss_file, *cmd]
    os.sync()
    start = time.perf_counter_ns()
    done = subprocess.run(full, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter_ns() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}):\n{done.stderr[-4000:]}")
    with open(rss_file, encoding="ascii") as handle:
        peak_kib, user, system = handle.read().split()[-3:]
    os.unlink(rss_file)
    return {"wall_s": round(wall / 1e9, 3), "peak_rss_kib": int(peak_kib), "user_s": float(user),
            "sys_s": float(system)}


def _engine(env: dict[str, str]) -> dict[str, str]:
    """What the library says under the CLI's environment, and the CLI's own ``--version`` line."""
    probe = "from artifactkit.engine.select import engine_name; print(engine_name())"
    said = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    version = subprocess.run([*cli_command(), "--version"], env=env, capture_output=True, text=True, check=False)
    return {"engine_name": said.stdout.strip(), "version_output": (version.stdout or version.stderr).strip()}


def bench_scale(base: str, files: int, rounds: int, cores: int, engine: str, *,
                trees: bool = False) -> dict[str, Any]:
    shape = scale_shape(files)
    src, store, dest, copy = (os.path.join(base, f"scale-{n}") for n in ("src", "store", "dest", "cp"))
    env = child_env(engine)
    said = _engine(env)
    if said["engine_name"] != engine:
        raise RuntimeError(f"scale: asked for the {engine} engine, the library says {said['engine_name']}")
    build_corpus(src, "scale", *shape)
    cli = cli_command()
    commands = {"publish": [*cli, "publish", "--store", store, "--name", "bench", src],
                "download": [*cli, "download", "--store", store, "bench@1", dest],
                "cp_a": ["cp", "-a", src, copy], "cp_a_beside_store": ["cp", "-a", src, copy]}
    raw: dict[str, list[dict[str, Any]]] = {op: [] for op in OPS}
    loads = []
    try:
        for round_no in range(rounds + 1):  # round 0: the warm-up, not kept
            loads.append([round(x, 2) for x in os.getloadavg()])
            for path in (store, dest, copy):
                if os.path.lexists(path):
                    shutil.rmtree(path)
            # Each operation is paired with a `cp -a` made with the same files resident: the publish with the
            # source alone, the download with the source and the store (on this VM a `cp -a` of a million files
            # took 2.2-2.9x as long beside 4 GiB more of resident tmpfs data, a store's or one file's: writing new
            # pages costs more the more is resident, and a download never runs without its store). The order
            # turns each round.
            order = (("cp_a", "publish", "cp_a_beside_store", "download") if round_no % 2 else
                     ("publish", "download", "cp_a_beside_store", "-store", "cp_a"))
            for op in order:
                if op == "-store":
                    shutil.rmtree(store)
                    continue
                got = timed_cli(commands[op], cores, env, os.path.join(base, "scale.time"))
                if round_no:
                    raw[op].append(got)
                # Off the clock, what no later op of the round reads goes at once: at a million files each tree
                # is ~5 GB of tmpfs, and four at a time would not fit this machine's memory.
                for path in {"cp_a": (copy,), "cp_a_beside_store": (copy,), "download": (dest,)}.get(op, ()):
                    shutil.rmtree(path)
        tree_ops = bench_tree_ops(base, src, cores, env) if trees else None
    finally:
        for path in (src, store, dest, copy):
            if os.path.lexists(path):
                shutil.rmtree(path)
    return {"trees": tree_ops, "files": shape[0], "bytes_per_file": shape[1], "dirs": shape[2], "rounds": rounds,
            "cores": cores,
            "engine": engine, **said, "cli": [os.path.basename(cli[0]), *cli[1:]], "loadavg_per_round": loads[1:],
            "ops": {op: _summary(raw[op]) for op in OPS},
            "vs_cp_a": {op: round(statistics.median([a["wall_s"] / b["wall_s"] for a, b in zip(raw[op], raw[peer],
                                                                                       strict=True)]), 3)
                        for op, peer in (("publish", "cp_a"), ("download", "cp_a_beside_store"))},
            "today": TODAY}


def bench_tree_ops(base: str, src: str, cores: int, env: dict[str, str], *, store: str = "",
                   stored: Callable[[], dict[str, int]] | None = None) -> dict[str, Any]:
    """Issue 52's operations on the scale tree, one CLI process each (wall time, peak RSS): a publish of it as
    the corpus gave it (atimes put back), verify, a re-publish after 10 files in 10 directories changed (and
    the bytes it added outside their blobs: tree objects and manifest), a ``download --path`` of one directory,
    and the ``diff`` of the two versions (which must name exactly those 10 files). ``store``: one that already
    holds ``trees@1`` of ``src`` as it is (``s3.py --trees``: no publish, atimes as they are), its objects and
    their sizes listed by ``stored``."""
    cli, local = cli_command(), not store
    # Chosen before the atimes are put back: listing a directory moves its atime, which a diff would then report.
    chosen, middle = ten_spread_files(src), middle_directory(src)

    def run(name: str, *args: str) -> dict[str, Any]:
        return timed_cli([*cli, *args], cores, env, os.path.join(base, f"{name}.time"))
    out: dict[str, Any] = {}
    if local:
        store = os.path.join(base, "trees-store")
        reset_source_atimes(src)
        out["publish"] = run("publish", "publish", "--store", store, "--name", "trees", src)
    listing = stored or functools.partial(_stored, store)
    out["verify"] = run("verify", "verify", "--store", store)
    before = listing()
    change_files(src, chosen)
    out["republish_10_changed"] = run("republish", "publish", "--store", store, "--name", "trees", src)
    added = {name: size for name, size in listing().items() if name not in before}
    new_content = {hashlib.sha256(Path(src, path).read_bytes()).hexdigest() for path in chosen}
    out["republish_bytes_outside_blobs"] = sum(size for name, size in added.items()
                                                if name.rpartition("/")[2] not in new_content)
    part = os.path.join(base, "trees-part")
    out["download_path_one_dir"] = run("path", "download", "--store", store, "trees@2", part, "--path", middle)
    out["download_path_files"] = sum(len(names) for _, _, names in os.walk(part))
    shutil.rmtree(part)
    out["diff"] = timed_diff(cli, store, cores, env, base)
    if local:
        shutil.rmtree(store)
    out["changed_files"] = chosen
    return out


def ten_spread_files(src: str) -> list[str]:
    """Ten files in ten directories spread over the tree (the first of each)."""
    dirs = sorted(os.listdir(src))
    return [os.path.join(group, sorted(os.listdir(os.path.join(src, group)))[0])
            for group in dirs[::max(1, len(dirs) // 10)][:10]]


def middle_directory(src: str) -> str:
    dirs = sorted(os.listdir(src))
    return dirs[len(dirs) // 2]


def change_files(src: str, chosen: list[str]) -> None:
    """The same size, other bytes: content, mtime and (the read) atime change."""
    for path in chosen:
        with open(os.path.join(src, path), "r+b") as handle:
            first = handle.read(1)
            handle.seek(0)
            handle.write(bytes([first[0] ^ 0xFF]))


def timed_diff(cli: list[str], store: str, cores: int, env: dict[str, str], base: str) -> dict[str, Any]:
    """``diff --json`` of the two versions, timed, with the paths it names."""
    full = [*cpu_set(cores), "/usr/bin/time", "-f", "%M %U %S", "-o", os.path.join(base, "diff.time"),
            *cli, "diff", "--store", store, "trees@1", "trees@2", "--json"]
    start = time.perf_counter_ns()
    done = subprocess.run(full, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter_ns() - start
    with open(os.path.join(base, "diff.time"), encoding="ascii") as handle:
        peak_kib = int(handle.read().split()[-3])
    doc = json.loads(done.stdout)
    return {"wall_s": round(wall / 1e9, 3), "peak_rss_kib": peak_kib,
            "paths": sorted({change["path"] for change in doc["changed"]} | set(doc["added"]) | set(doc["removed"]))}


def _stored(store: str) -> dict[str, int]:
    """Every file of the store (``blobs/<sha>``, ``manifests/...``) with its size."""
    return {os.path.relpath(os.path.join(top, name), store): os.lstat(os.path.join(top, name)).st_size
            for top, _, names in os.walk(store) for name in names if not top.endswith(("locks", "staging"))}


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    peak_kib = max(s["peak_rss_kib"] for s in samples)

    def median(field: str) -> float:
        return round(statistics.median(s[field] for s in samples), 3)
    return {"samples_s": [s["wall_s"] for s in samples], "median_s": median("wall_s"), "user_s": median("user_s"),
            "sys_s": median("sys_s"),
            # MB as the issue writes it (10^6 bytes; GNU time's %M is KiB): the stricter reading of "223 MB".
            "peak_rss_mb": round(peak_kib * 1024 / 1e6, 1), "peak_rss_mib": round(peak_kib / 1024, 1)}


def _check_tools() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"needs {', '.join(missing)} (the peers and the conditions every child runs under)")
    probe = "from artifactkit.engine.select import native_available; print(native_available())"
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
    parser.add_argument("--scale-only", action="store_true", help="the scale run alone, on --engine")
    parser.add_argument("--engine", choices=("native", "python"), default="native", help="--scale-only's engine")
    parser.add_argument("--trees", action="store_true",
                        help="--scale-only: then verify, re-publish after 10 changes, download --path and diff "
                             "(issue 52)")
    return parser


def scale_only(args: argparse.Namespace, argv: list[str]) -> int:
    cores = len(os.sched_getaffinity(0))
    files = args.scale_files or SCALE_FILES
    # Four trees (source, store, download, copy) of a page a file, and their inodes: 4 KiB a file each, doubled.
    with tmpfs_base(f"{max(4, files * 4 * 8 // (1 << 20) + 1)}g") as (tmpfs, note):
        base = tempfile.mkdtemp(prefix="ak-scale-", dir=tmpfs)
        try:
            env = environment(tmpfs, note)  # first: a missing tool it asks for fails before the run, not after it
            scale = bench_scale(base, files, args.scale_rounds or 3, cores, args.engine, trees=args.trees)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    doc = {"schema": "artifactkit.bench_scale/1", "command": command_line(argv), "environment": env, "scale": scale}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    ops = scale["ops"]
    print(" ".join(f"{op}: {ops[op]['median_s']} s, {ops[op]['peak_rss_mb']} MB;" for op in OPS))
    return 0


def write_docs(doc: dict[str, Any]) -> None:
    for name, text in render_blocks(doc).items():
        write_table(PAGE, name, text)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.table_from:
        with open(args.table_from, encoding="utf-8") as handle:
            kept = json.load(handle)
        if kept.get("schema") != SCHEMA:  # issues 7 and 16's runs: their own tables went with their engine
            raise SystemExit(f"{args.table_from}: schema {kept.get('schema')}, not {SCHEMA}")
        print(render_all(kept))
        if not args.no_docs:
            write_docs(kept)
        return 0
    if not args.output:
        raise SystemExit("--output FILE is required for a run (quick runs: a path under /tmp)")
    if args.scale_only:
        return scale_only(args, sys.argv[1:] if argv is None else argv)
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

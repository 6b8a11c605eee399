"""Two revisions of the store, paired: which is faster, in fresh processes alternated round by round. Run from
the repository root:

    python -m benches.revisions --base REV [--candidate REV] --output FILE.json
    python -m benches.revisions --base 775c041 --candidate a364e79 --output diagnostics/results/bench-core-ab-chain.json
    python -m benches.revisions --table-from diagnostics/results/bench-core-ab-chain.json
    python -m benches.revisions --table-from diagnostics/results/bench-core-ab-sharded-blobs.json --moves
    git worktree add /tmp/ak-old REV
    python -m benches.revisions --old /tmp/ak-old --new . [--rounds 7] [--files 10000] [--new-workers 2]
        [--republish [--s3] | --stat-cache] [--file-bytes N] [--engine E] [--output FILE.json]

``store.py`` measures one build against the peers; a change is judged against the code before it, and two runs of
that script an hour apart differ by 10-30 % here.

Built revisions (``--base``/``--candidate``, git revisions): each its own ``artifactkit/`` package and its own
core (``cargo build --release`` into a private target, the same flags for both), alternated round by round (AB,
BA, ...) on a tmpfs: each round a fresh child (``child.py``, its imports off the clock) publishes then downloads
the corpus (``roundtrip``) under ``taskset`` of as many CPUs as threads, on the native engine. The child imports
the revision's package from ``PYTHONPATH`` (checked). Reported per cell: each side's median wall and CPU time and
the wall time inside each core function (``child.time_the_core``), and the median of per-round ratios base /
candidate (above 1: the candidate is faster).

Checkouts as they are (``--old``/``--new``, directories; whatever engine they import): ``--files`` x
``--file-bytes`` files in 100 dirs with historical ns times on /dev/shm, one child per measurement with
``PYTHONPATH`` set to each checkout (checked), the order shuffled per round (seeded): the median ms of publish and
of download per label, with every sample. ``--new-workers N`` (repeatable) runs the new checkout once per N with
``workers=N`` (labels ``new@wN``). ``--stat-cache`` times a cached re-publish of the unchanged tree instead
(each label its own store, primed by two cached publishes once the tree is older than the cache's racy window);
``--republish`` an uncached re-publish (every blob already stored: what the publish-time blob check costs, issue
48), with ``--s3`` into a bucket of a throw-away SeaweedFS (``weed mini`` on loopback, its data on the tmpfs).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Final

from benches.env import (
    CORPORA,
    build_corpus,
    child_env,
    code_state,
    command_line,
    environment,
    scratch_on_tmpfs,
    tmpfs_base,
)
from benches.rounds import Cell, run_child
from diagnostics.docs_tables import rerender, write_table

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


CHECKOUT_CHILD: Final = r"""
import os, resource, sys, time
import artifactkit
from artifactkit import Store
def cpu_us():  # user + system of this process (all its threads) and any children (reaped by then)
    return sum(int((r.ru_utime + r.ru_stime) * 1e6) for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                               resource.getrusage(resource.RUSAGE_CHILDREN)))
src, base, cached = sys.argv[1], sys.argv[2], sys.argv[3] == "cached"
kept = sys.argv[3] in ("cached", "republish")  # timed alone ("download" 0), its store kept for the next round
# Passed only when asked for: "" is the engine's default, also in a checkout older than the argument.
asked = {"workers": int(sys.argv[4])} if sys.argv[4] else {}
store = Store(os.path.join(base, "store"))
c0 = cpu_us(); t0 = time.perf_counter_ns(); ref = store.publish(src, "m", stat_cache=cached, **asked)
t1 = time.perf_counter_ns(); c1 = cpu_us()
t2, c2 = t1, c1
if not kept:
    store.download(ref, os.path.join(base, "out"), **asked); t2 = time.perf_counter_ns(); c2 = cpu_us()
print((t1 - t0) // 1000, (t2 - t1) // 1000, c1 - c0, c2 - c1, os.path.dirname(os.path.dirname(artifactkit.__file__)))
"""


# The kernel's coarse realtime clock, which stamps inode times (the stat cache's racy rule is on it).
_CLOCK_REALTIME_COARSE = 5
_RACY_WINDOW_NS = 2_000_000_000


def wait_past_racy_window(src: str) -> None:
    """Until every ctime under ``src`` is older than the stat cache's racy window: a condition, checked on
    the clock the kernel stamps inodes with (a fresh tree's files would otherwise be hashed again)."""
    newest = max(os.lstat(os.path.join(top, name)).st_ctime_ns
                 for top, dirs, files in os.walk(src) for name in [*dirs, *files])
    while time.clock_gettime_ns(_CLOCK_REALTIME_COARSE) <= newest + _RACY_WINDOW_NS:
        time.sleep(0.05)


def make_tree(src: str, files: int, size: int = 1024) -> None:
    os.mkdir(src)
    per_dir = max(1, files // 100)
    for d in range((files + per_dir - 1) // per_dir):
        os.mkdir(f"{src}/d{d}")
        for f in range(min(per_dir, files - d * per_dir)):
            path = f"{src}/d{d}/f{f}"
            with open(path, "wb") as handle:
                handle.write(os.urandom(size))
            os.utime(path, ns=(1_000_000_000_123_456_789, 1_100_000_000_987_654_321))


def run_checkout(src: str, base: str, checkout: str, workers: int | None, *, cached: bool, mode: str = "") -> list[str]:
    """One measurement in a fresh interpreter that imports ``checkout``'s artifactkit (checked)."""
    # Every child gets the same environment but for this value: a variable only some children had once
    # went with a 12-25% difference between identical code (workers go as an argument for that reason).
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    # cwd too: ``-c`` puts the current directory first on sys.path, ahead of PYTHONPATH, and an
    # editable install resolves to its own checkout; until this was checked, every label of a run
    # started in the new checkout imported the new code (results before 2026-12-01 session 3).
    out = subprocess.run([sys.executable, "-c", CHECKOUT_CHILD, src, base, mode or ("cached" if cached else "fresh"),
                          "" if workers is None else str(workers)], env=env,
                         capture_output=True, text=True, check=True, cwd=checkout).stdout.split()
    if os.path.realpath(out[4]) != os.path.realpath(checkout):
        raise SystemExit(f"{checkout} imported artifactkit from {out[4]}, not from itself")
    return out


def compare_built(args: argparse.Namespace, argv: list[str]) -> int:
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
                for k in range(args.rounds or 12):
                    order = ("base", "candidate") if k % 2 == 0 else ("candidate", "base")
                    rounds.append({side: run_round(sides[side], src, tmpfs, threads) for side in order})
                digests = {r[s]["digest"] for r in rounds for s in sides}
                if len(digests) != 1:
                    raise SystemExit(f"{corpus}: the two revisions published different manifests: {sorted(digests)}")
                cells.append({"corpus": corpus, "threads": threads, "summary": summarize(rounds), "rounds": rounds})
            shutil.rmtree(src)
        env = environment(tmpfs, note)
    doc = {"schema": SCHEMA, "command": command_line(argv, "revisions"),
           "rounds": args.rounds or 12, "base": built["base"], "candidate": built["candidate"], "environment": env,
           "method": __doc__.split("\n\n", 2)[2].strip(), "duration_s": round(time.monotonic() - started, 1),
           "cells": cells}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(render(doc, moves=args.moves))
    if not args.no_docs:
        write_table(PAGE, args.block, render(doc, moves=args.moves))
    return 0


def compare_checkouts(args: argparse.Namespace, argv: list[str]) -> int:
    if args.s3 and not args.republish:
        raise SystemExit("--s3 times a re-publish only (--republish)")
    if args.engine:
        os.environ["ARTIFACTKIT_ENGINE"] = args.engine  # every child inherits it: both checkouts alike
    rounds = args.rounds or 7
    mode = "cached" if args.stat_cache else "republish" if args.republish else "fresh"
    kept = mode != "fresh"
    labels = {"old": (args.old, None)}
    labels.update({f"new@w{n}": (args.new, n) for n in args.new_workers} or {"new": (args.new, None)})
    with scratch_on_tmpfs() as root, contextlib.ExitStack() as stack:
        new_store: Callable[[], str] = functools.partial(tempfile.mkdtemp, dir=root)
        if args.s3:
            from tests.support.seaweedfs import running_seaweedfs  # noqa: PLC0415 - only for --s3

            endpoint = stack.enter_context(running_seaweedfs(os.path.join(root, "weed")))
            os.environ.update({**endpoint.env(), "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                               "AWS_SHARED_CREDENTIALS_FILE": os.devnull})  # the children's, nothing of this machine's
            new_store = lambda: f"s3://{endpoint.bucket}/{secrets.token_hex(6)}"  # noqa: E731
        src = os.path.join(root, "src")
        make_tree(src, args.files, args.file_bytes)
        primed = {}
        if args.stat_cache:
            wait_past_racy_window(src)
        if kept:
            for label, (checkout, workers) in labels.items():
                primed[label] = new_store()
                # Cached: the first records, the second records the atimes the first's reads left.
                for _ in range(2 if args.stat_cache else 1):
                    run_checkout(src, primed[label], checkout, workers, cached=args.stat_cache, mode=mode)
        samples: dict[str, list[tuple[int, int]]] = {label: [] for label in labels}
        cpu: dict[str, list[tuple[int, int]]] = {label: [] for label in labels}
        loads = []
        shuffler = random.Random(args.seed)
        for _ in range(rounds):
            loads.append(os.getloadavg()[0])
            order = list(labels)
            shuffler.shuffle(order)  # a control run (one checkout as both) showed 10-20% for whichever ran in
            for label in order:      # the fixed alternation's positions; a seeded shuffle spreads that out
                checkout, workers = labels[label]
                base = primed[label] if kept else tempfile.mkdtemp(dir=root)
                out = run_checkout(src, base, checkout, workers, cached=args.stat_cache, mode=mode)
                samples[label].append((int(out[0]), int(out[1])))
                cpu[label].append((int(out[2]), int(out[3])))
                if not kept:
                    shutil.rmtree(base)
        medians = {label: {"publish_ms": statistics.median(p for p, _ in values) / 1000,
                           "download_ms": statistics.median(d for _, d in values) / 1000,
                           "round_trip_ms": statistics.median(p + d for p, d in values) / 1000,
                           "publish_cpu_ms": statistics.median(p for p, _ in cpu[label]) / 1000,
                           "download_cpu_ms": statistics.median(d for _, d in cpu[label]) / 1000}
                   for label, values in samples.items()}
        # Each round ran every label: the median of a label's per-round ratios to "old" (above 1: slower than old).
        def over_old(mine: list[tuple[int, int]], old: list[tuple[int, int]]) -> float:
            return statistics.median(p / o for (p, _), (o, _) in zip(mine, old, strict=True))

        paired = {label: {"publish": over_old(values, samples["old"]), "publish_cpu": over_old(cpu[label], cpu["old"])}
                  for label, values in samples.items() if label != "old"}
        for label, values in samples.items():
            print(f"{label}: publish median {medians[label]['publish_ms']:.0f} ms, download median "
                  f"{medians[label]['download_ms']:.0f} ms, round trip {medians[label]['round_trip_ms']:.0f} ms; CPU "
                  f"{medians[label]['publish_cpu_ms']:.0f} + {medians[label]['download_cpu_ms']:.0f} ms; "
                  f"samples (us) {values}")
        for label, ratio in paired.items():
            print(f"{label} / old, paired median: publish {ratio['publish']:.2f}x, its CPU {ratio['publish_cpu']:.2f}x")
    if args.output:
        revs = {label: subprocess.run(["git", "rev-parse", "HEAD"], cwd=c, capture_output=True, text=True,
                                      check=False).stdout.strip() for label, (c, _) in labels.items()}
        doc = {"schema": "artifactkit.bench-revisions/1",
               # Sanitized like every evidence file: checkouts by base name, their commits below.
               "command": command_line(argv, "revisions"),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                           "kernel": os.uname().release, "python": sys.version.split()[0]},
               "code_under_test": code_state(),
               "files": args.files, "file_bytes": args.file_bytes, "engine": os.environ.get("ARTIFACTKIT_ENGINE", ""),
               "rounds": rounds, "loadavg_1m_per_round": loads, "store": "s3" if args.s3 else "local",
               "measured": {"cached": "cached re-publish", "republish": "uncached re-publish"}.get(mode,
                                                                                                  "publish + download"),
               "checkouts": {label: {"commit": revs[label], "workers": w} for label, (c, w) in labels.items()},
               "medians": medians, "paired_over_old": paired, "samples_us": samples, "cpu_samples_us": cpu}
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-from", metavar="FILE", help="print a kept run's table, write it into the docs")
    parser.add_argument("--rounds", type=int, help="paired rounds (per cell; default 12 built, 7 checkouts)")
    parser.add_argument("--output", help="the evidence JSON (required for built revisions)")
    revs = parser.add_argument_group("built revisions")
    revs.add_argument("--base", help="the revision compared against (git rev)")
    revs.add_argument("--candidate", default="HEAD", help="the revision measured (default HEAD: commit first)")
    revs.add_argument("--corpus", action="append", choices=("small", "many"), help="default: small and many")
    revs.add_argument("--threads", type=int, action="append", help="default: 1 and every core")
    revs.add_argument("--no-docs", action="store_true", help="do not write the table into docs/performance.md")
    revs.add_argument("--block", default=BLOCK, help=f"the docs' block the table goes in (default {BLOCK})")
    revs.add_argument("--moves", action="store_true", help="show the time in rename_staged too")
    taken = parser.add_argument_group("checkouts as they are")
    taken.add_argument("--old", help="checkout of the earlier revision")
    taken.add_argument("--new", help="checkout of the later revision")
    taken.add_argument("--files", type=int, default=10_000)
    taken.add_argument("--new-workers", type=int, action="append", default=[], metavar="N",
                       help="also run the new checkout with workers=N (repeatable)")
    taken.add_argument("--seed", type=int, default=16, help="seed of the per-round order (default %(default)s)")
    taken.add_argument("--stat-cache", action="store_true",
                       help="time a cached re-publish of the unchanged tree (each label's own primed store)")
    taken.add_argument("--republish", action="store_true",
                       help="time an uncached re-publish of the unchanged tree (each label's own primed store)")
    taken.add_argument("--file-bytes", type=int, default=1024, help="bytes per file (default %(default)s)")
    taken.add_argument("--engine", choices=("native", "python"), help="ARTIFACTKIT_ENGINE of every child")
    taken.add_argument("--s3", action="store_true", help="with --republish: the stores in a bucket (SeaweedFS)")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.table_from:
        return rerender(args.table_from, lambda doc: render(doc, moves=args.moves), PAGE, args.block)
    if args.old or args.new:
        if not (args.old and args.new):
            raise SystemExit("--old DIR and --new DIR go together")
        return compare_checkouts(args, given)
    return compare_built(args, given)


if __name__ == "__main__":
    sys.exit(main())

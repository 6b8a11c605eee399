"""Paired timing of publish + download of one tree with two checkouts of artifactkit (before/after a change).

    git worktree add /tmp/ak-old <REV>
    python3 diagnostics/bench_revisions.py --old /tmp/ak-old --new . [--rounds 7] [--files 10000]
        [--new-workers 1 --new-workers 2] [--output diagnostics/results/FILE.json]

Builds ``--files`` x 1 KiB files in 100 dirs with historical ns times on /dev/shm, then runs, alternating
which goes first, one child process per measurement with ``PYTHONPATH`` set to each checkout, and prints the
median ms of publish and of download for each, with every sample. ``--new-workers N`` (repeatable) runs the
new checkout once per N with ``workers=N`` (labels ``new@wN``: the native core's threads, nothing on the
reference engine), so one run gives the before/after and the thread scaling; ``--output`` keeps it all as
JSON with the command line. A quick check that a
refactor did not make the code path slower; ``bench_store.py`` is the full benchmark against peers.

``--stat-cache`` times a cached re-publish of the unchanged tree instead (``publish(..., stat_cache=True)``;
"download" is then 0): each label gets its own store, primed by two cached publishes once the tree is older
than the cache's racy window (each checkout writes the cache schema it reads). ``--republish`` times an
uncached re-publish of the unchanged tree (every file read, every blob already stored: what the publish-time
blob check costs, issue 48), each label's store primed by one publish; with ``--s3`` into a bucket of a
throw-away SeaweedFS (``weed mini`` on loopback, its data on the tmpfs). ``--file-bytes`` sets the file size
(``--files 4 --file-bytes 67108864``: a few large files); ``--engine`` the engine every child runs on.
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

from bench_env import code_state, scratch_on_tmpfs

CHILD = r"""
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


def run_child(src: str, base: str, checkout: str, workers: int | None, *, cached: bool, mode: str = "") -> list[str]:
    """One measurement in a fresh interpreter that imports ``checkout``'s artifactkit (checked)."""
    # Every child gets the same environment but for this value: a variable only some children had once
    # went with a 12-25% difference between identical code (workers go as an argument for that reason).
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    # cwd too: ``-c`` puts the current directory first on sys.path, ahead of PYTHONPATH, and an
    # editable install resolves to its own checkout; until this was checked, every label of a run
    # started in the new checkout imported the new code (results before 2026-12-01 session 3).
    out = subprocess.run([sys.executable, "-c", CHILD, src, base, mode or ("cached" if cached else "fresh"),
                          "" if workers is None else str(workers)], env=env,
                         capture_output=True, text=True, check=True, cwd=checkout).stdout.split()
    if os.path.realpath(out[4]) != os.path.realpath(checkout):
        raise SystemExit(f"{checkout} imported artifactkit from {out[4]}, not from itself")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="checkout of the earlier revision")
    parser.add_argument("--new", required=True, help="checkout of the later revision")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--new-workers", type=int, action="append", default=[], metavar="N",
                        help="also run the new checkout with workers=N (repeatable)")
    parser.add_argument("--output", help="write the samples and medians as JSON here")
    parser.add_argument("--seed", type=int, default=16, help="seed of the per-round order (default %(default)s)")
    parser.add_argument("--stat-cache", action="store_true",
                        help="time a cached re-publish of the unchanged tree (each label's own primed store)")
    parser.add_argument("--republish", action="store_true",
                        help="time an uncached re-publish of the unchanged tree (each label's own primed store)")
    parser.add_argument("--file-bytes", type=int, default=1024, help="bytes per file (default %(default)s)")
    parser.add_argument("--engine", choices=("native", "python"), help="ARTIFACTKIT_ENGINE of every child")
    parser.add_argument("--s3", action="store_true", help="with --republish: the stores in a bucket (SeaweedFS)")
    args = parser.parse_args(argv)
    if args.s3 and not args.republish:
        raise SystemExit("--s3 times a re-publish only (--republish)")
    if args.engine:
        os.environ["ARTIFACTKIT_ENGINE"] = args.engine  # every child inherits it: both checkouts alike
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
                    run_child(src, primed[label], checkout, workers, cached=args.stat_cache, mode=mode)
        samples: dict[str, list[tuple[int, int]]] = {label: [] for label in labels}
        cpu: dict[str, list[tuple[int, int]]] = {label: [] for label in labels}
        loads = []
        shuffler = random.Random(args.seed)
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            order = list(labels)
            shuffler.shuffle(order)  # a control run (one checkout as both) showed 10-20% for whichever ran in
            for label in order:      # the fixed alternation's positions; a seeded shuffle spreads that out
                checkout, workers = labels[label]
                base = primed[label] if kept else tempfile.mkdtemp(dir=root)
                out = run_child(src, base, checkout, workers, cached=args.stat_cache, mode=mode)
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
               "command": "python3 diagnostics/bench_revisions.py " + " ".join(
                   os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:]),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                           "kernel": os.uname().release, "python": sys.version.split()[0]},
               "code_under_test": code_state(),
               "files": args.files, "file_bytes": args.file_bytes, "engine": os.environ.get("ARTIFACTKIT_ENGINE", ""),
               "rounds": args.rounds, "loadavg_1m_per_round": loads, "store": "s3" if args.s3 else "local",
               "measured": {"cached": "cached re-publish", "republish": "uncached re-publish"}.get(mode,
                                                                                                  "publish + download"),
               "checkouts": {label: {"commit": revs[label], "workers": w} for label, (c, w) in labels.items()},
               "medians": medians, "paired_over_old": paired, "samples_us": samples, "cpu_samples_us": cpu}
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Paired timing of the execute stage alone: the reference's per-file functions against the native core's
batch functions (1 and 2 threads), and one ``cp -a`` of the same tree, on tmpfs.

    python3 diagnostics/bench_native.py [--rounds 7] [--files 10000] [--output diagnostics/results/FILE.json]

Builds ``many`` (``--files`` x 1 KiB of distinct content in 100 dirs, historical ns times) on /dev/shm. Each
round runs every variant once, in a shuffled order, each on a fresh staging dir (stage: every file read,
hashed and staged, nothing stored yet) or a fresh destination whose directories already exist (create: every
file created from its blob, verified, restored and read back). The scan, the plan, the commit and the
directory times are not in these figures; ``cp -a`` does all of its work (walk, mkdir, copy, times), so
the ratios show the execute stage's share of a round trip against a whole copy. Wall and CPU time (all
threads of this process, or the ``cp`` child) are reported as medians with every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from artifactkit import _native
from artifactkit.engine import native
from artifactkit.engine.reference.create import create_items
from artifactkit.engine.reference.scan import capture_tree, scan_tree
from artifactkit.engine.reference.stage import stage_file
from artifactkit.metadata.model import ROOT
from artifactkit.metadata.times import shallowest_first
from artifactkit.store.blob_check import blob_lookup
from artifactkit.store.blobs import BlobSource
from artifactkit.store.paths import parent_of

_DIR = os.O_RDONLY | os.O_DIRECTORY


def build_many(root: str, files: int) -> None:
    rng = random.Random(28)
    for d in range(100):
        os.mkdir(os.path.join(root, f"d{d:03}"))
    for i in range(files):
        path = os.path.join(root, f"d{i % 100:03}", f"f{i:05}")
        with open(path, "wb") as out:
            out.write(rng.randbytes(1024))
        os.utime(path, ns=(1_000_000_000_123_456_789 + i, 1_200_000_000_987_654_321 - i))


def child_cpu_ns() -> int:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def timed(work: Callable[[], None], *, child: bool = False) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call: this process's CPU (every thread), or its children's for ``cp``."""
    cpu0 = child_cpu_ns() if child else time.process_time_ns()
    t0 = time.perf_counter_ns()
    work()
    wall = time.perf_counter_ns() - t0
    cpu = (child_cpu_ns() if child else time.process_time_ns()) - cpu0
    return wall / 1e6, cpu / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="bench-native-", dir="/dev/shm")
    try:
        return run(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(base: str, args: argparse.Namespace) -> int:
    src, blobs = os.path.join(base, "src"), os.path.join(base, "blobs")
    os.mkdir(src)
    os.mkdir(blobs)
    build_many(src, args.files)
    tree = scan_tree(src)
    items = [(i, e, tree.identities[e.path]) for i, e in enumerate(tree.entries) if e.kind == "file"]
    entries = capture_tree(src)
    for e in entries:
        if e.kind == "file" and e.sha256 is not None:
            shutil.copyfile(os.path.join(src, e.path), os.path.join(blobs, e.sha256))
    dirs = shallowest_first(e.path for e in entries if e.kind == "dir")
    children: dict[str, list[Any]] = {}
    for e in entries:
        if e.path != ROOT and e.kind == "file":
            children.setdefault(parent_of(e.path), []).append(e)
    create_batch = [(d, children[d]) for d in dirs if d in children]
    blobs_fd = os.open(blobs, _DIR)
    counter = iter(range(10**9))

    def fresh(kind: str) -> tuple[str, int]:
        path = os.path.join(base, f"{kind}-{next(counter)}")
        os.mkdir(path)
        if kind == "dest":
            for d in dirs[1:]:
                os.mkdir(os.path.join(path, d))
        return path, os.open(path, _DIR)

    def stage_python() -> Callable[[], None]:
        empty = fresh("empty")[1]  # no blob stored yet: every file is staged
        _, txn = fresh("txn")
        has_blob, seen = blob_lookup(empty, 0), set[str]()
        return lambda: [stage_file(src, item, txn, has_blob, seen) for item in items] and None

    def stage_native(threads: int) -> Callable[[], None]:
        empty = fresh("empty")[1]
        _, txn = fresh("txn")
        return lambda: native.stage_files(src, txn, empty, items, threads=threads, state=_native.StageState()) and None

    def create_python() -> Callable[[], None]:
        _, root = fresh("dest")
        return lambda: create_items(root, create_batch, BlobSource(blobs, dir_fd=blobs_fd)) and None

    def create_native(threads: int) -> Callable[[], None]:
        _, root = fresh("dest")
        return lambda: native.create_files(root, BlobSource(blobs, dir_fd=blobs_fd), create_batch, threads)

    def cp_a() -> Callable[[], None]:
        dst = os.path.join(base, f"cp-{next(counter)}")
        return lambda: subprocess.run(["cp", "-a", src, dst], check=True) and None

    variants: dict[str, Callable[[], Callable[[], None]]] = {
        "stage python": stage_python, "stage native 1t": lambda: stage_native(1),
        "stage native 2t": lambda: stage_native(2), "create python": create_python,
        "create native 1t": lambda: create_native(1), "create native 2t": lambda: create_native(2), "cp -a": cp_a,
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    rng = random.Random(7)
    for _ in range(args.rounds):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            work = variants[name]()
            samples[name].append(timed(work, child=name == "cp -a"))
    cp_wall = statistics.median(w for w, _ in samples["cp -a"])
    cp_cpu = statistics.median(c for _, c in samples["cp -a"])
    print(f"many: {args.files} x 1 KiB in 100 dirs, tmpfs, {args.rounds} paired rounds, {os.cpu_count()} cores")
    print(f"{'variant':18} {'wall ms':>9} {'x cp -a':>8} {'CPU ms':>9} {'x cp -a':>8} {'files/s':>10}")
    rows = {}
    for name, got in samples.items():
        wall, cpu = statistics.median(w for w, _ in got), statistics.median(c for _, c in got)
        rows[name] = {"wall_ms": wall, "cpu_ms": cpu, "samples": got}
        print(f"{name:18} {wall:9.1f} {wall / cp_wall:8.2f} {cpu:9.1f} {cpu / cp_cpu:8.2f} "
              f"{args.files / wall * 1000:10.0f}")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"schema": "artifactkit.bench_native/1", "command": " ".join(["bench_native.py", *sys.argv[1:]]),
                       "files": args.files, "rounds": args.rounds, "cores": os.cpu_count(), "results": rows},
                      out, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a publish of ``many`` spends its CPU on the native executor, stage by stage, with the scan and the
manifest encoding by the reference (Python) and by the native core, paired, and one ``cp -a`` of the tree.

    ARTIFACTKIT_ENGINE=native python3 diagnostics/bench_scan.py [--rounds 9] [--output FILE.json]

Builds ``many`` (10,000 x 1 KiB in 100 dirs, ``bench_store.build_corpus``) on /dev/shm. Each round publishes
it once per variant, in a shuffled order, into a fresh store; ``cp -a`` copies it once. The stages are timed
by wrapping their functions (``capture_source``: the scan, ``plan_reads``, the executor's ``stage_files``,
``assemble``: the manifest, the transaction's ``flush``, ``claim_version``) with ``time.process_time_ns``:
the CPU of every thread of this process, so the core's threads count in full. The "reference" variant is the
same code with the two native call sites of ``publish.py`` turned off, so nothing else differs.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from artifactkit import Store
from artifactkit.engine import native
from artifactkit.engine.native import NativeEngine
from artifactkit.engine.reference.engine import PythonEngine
from artifactkit.store import local_backend, publish
from artifactkit.store import store as store_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_corpus import build_corpus  # the benchmark's own corpus, from this directory

STAGES = ("scan", "plan", "stage", "assemble", "flush", "claim")
_spent: dict[str, int] = {}


def _timed(owner: Any, name: str, stage: str) -> None:
    real = getattr(owner, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time_ns()
        try:
            return real(*args, **kwargs)
        finally:
            _spent[stage] = _spent.get(stage, 0) + time.process_time_ns() - start
    setattr(owner, name, call)


def instrument() -> None:
    _timed(store_module, "capture_source", "scan")
    _timed(publish, "plan_reads", "plan")
    _timed(publish, "assemble", "assemble")
    _timed(publish, "claim_version", "claim")
    _timed(native, "stage_files", "stage")
    _timed(local_backend.LocalTxn, "flush", "flush")


@contextmanager
def reference_scan_and_manifest() -> Iterator[None]:
    """The native engine's capture and encoder turned off: the reference's run instead, the rest as it is."""
    capture, encode = vars(NativeEngine)["capture"], vars(NativeEngine)["encode"]
    NativeEngine.capture = PythonEngine.capture  # type: ignore[method-assign,assignment]
    NativeEngine.encode = lambda *args: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        NativeEngine.capture, NativeEngine.encode = capture, encode  # type: ignore[method-assign]


def child_cpu_ns() -> int:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def one_publish(base: str, src: str, reference: bool, n: int) -> dict[str, float]:
    _spent.clear()
    root = os.path.join(base, f"store-{n}")
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    if reference:
        with reference_scan_and_manifest():
            Store(root).publish(src, "many")
    else:
        Store(root).publish(src, "many")
    cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
    shutil.rmtree(root)
    row = {"cpu_ms": cpu / 1e6, "wall_ms": wall / 1e6, **{s: _spent.get(s, 0) / 1e6 for s in STAGES}}
    row["other"] = row["cpu_ms"] - sum(row[s] for s in STAGES)
    return row


def one_cp(base: str, src: str, n: int) -> dict[str, float]:
    dst = os.path.join(base, f"cp-{n}")
    cpu, wall = child_cpu_ns(), time.perf_counter_ns()
    subprocess.run(["cp", "-a", src, dst], check=True)
    row = {"cpu_ms": (child_cpu_ns() - cpu) / 1e6, "wall_ms": (time.perf_counter_ns() - wall) / 1e6}
    shutil.rmtree(dst)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    if os.environ.get("ARTIFACTKIT_ENGINE") != "native":
        parser.error("run with ARTIFACTKIT_ENGINE=native: the stages measured are the native executor's")
    instrument()
    base = tempfile.mkdtemp(prefix="bench-scan-", dir="/dev/shm")
    try:
        src = os.path.join(base, "src")
        build_corpus(src, "many", 10_000, 1 << 10, 100)
        variants: dict[str, Callable[[int], dict[str, float]]] = {
            "reference scan + manifest": lambda n: one_publish(base, src, True, n),
            "native scan + manifest": lambda n: one_publish(base, src, False, n),
            "cp -a": lambda n: one_cp(base, src, n),
        }
        for run in variants.values():  # warm-up: imports, caches
            run(0)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        rng, count = random.Random(28), 1
        for _ in range(args.rounds):
            order = list(variants)
            rng.shuffle(order)
            for name in order:
                samples[name].append(variants[name](count))
                count += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(samples, args)
    return 0


def report(samples: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    cp = statistics.median(row["cpu_ms"] for row in samples["cp -a"])
    medians = {name: {key: statistics.median(row[key] for row in rows) for key in rows[0]}
               for name, rows in samples.items()}
    print(f"many: 10,000 x 1 KiB in 100 dirs, tmpfs, {args.rounds} paired rounds, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; medians, CPU ms")
    keys = ["cpu_ms", "wall_ms", *STAGES, "other"]
    print(f"{'variant':28}" + "".join(f"{key:>10}" for key in keys) + f"{'x cp -a':>9}")
    for name, row in medians.items():
        print(f"{name:28}" + "".join(f"{row[key]:10.1f}" if key in row else f"{'':>10}" for key in keys)
              + f"{row['cpu_ms'] / cp:9.2f}")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"schema": "artifactkit.bench_scan/1", "command": " ".join(["bench_scan.py", *sys.argv[1:]]),
                       "rounds": args.rounds, "cores": os.cpu_count(), "medians": medians, "samples": samples},
                      out, indent=1, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())

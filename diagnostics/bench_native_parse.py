"""Paired timing of the manifest parse on the native engine: a whole download of ``many`` with the manifest
parsed by the reference (``manifest.parse_manifest``, as before the core parsed it) and by the core
(``NativeEngine.parse``), the parse of its manifest alone both ways, and one ``cp -a`` of the tree.

    ARTIFACTKIT_ENGINE=native python3 diagnostics/bench_native_parse.py [--rounds 7] [--output FILE.json]

Builds ``many`` (``bench_store.build_corpus``: 10,000 x 1 KiB in 100 dirs) on /dev/shm and publishes it once.
Each round runs every variant once, in a shuffled order, each download into a fresh destination. CPU time
(all threads of this process, or the ``cp`` child) is the figure to read on a shared machine; wall time is
reported too. Medians with every sample.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_store import build_corpus  # this directory's module, by the line above

from artifactkit import Store
from artifactkit.engine.native import NativeEngine
from artifactkit.engine.reference.engine import PythonEngine
from artifactkit.store.layout import ArtifactRef
from artifactkit.store.manifest import parse_manifest


def cpu_ns(*, child: bool) -> int:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if child else resource.RUSAGE_SELF)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def timed(work: Callable[[], None], *, child: bool = False) -> tuple[float, float]:
    wall, cpu = time.perf_counter_ns(), cpu_ns(child=child)
    work()
    return (time.perf_counter_ns() - wall) / 1e6, (cpu_ns(child=child) - cpu) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    if os.environ.get("ARTIFACTKIT_ENGINE") != "native":
        parser.error("run with ARTIFACTKIT_ENGINE=native: the download under test is the native engine's")
    base = tempfile.mkdtemp(prefix="bench-parse-", dir="/dev/shm")
    try:
        return run(base, args)
    finally:
        shutil.rmtree(base)


def run(base: str, args: argparse.Namespace) -> int:
    src, store = os.path.join(base, "many"), Store(os.path.join(base, "store"))
    build_corpus(src, "many", 10_000, 1024, 100)
    ref = store.publish(src, "many")
    body = store.manifest(ref).to_bytes()
    chosen = vars(NativeEngine)["parse"]  # the switch this benchmark flips: the native engine's parse
    count = iter(range(10**6))
    engine = NativeEngine(1, "parse")

    def download(core: bool) -> Callable[[], None]:
        def work() -> None:
            NativeEngine.parse = chosen if core else PythonEngine.parse  # type: ignore[method-assign]
            try:
                store.download(ref, os.path.join(base, f"dest-{next(count)}"))
            finally:
                NativeEngine.parse = chosen  # type: ignore[method-assign]
        return work

    def parse_reference() -> None:
        parse_manifest(body, where="m")

    def parse_core() -> None:
        engine.parse(ArtifactRef(ref.name, ref.version, ref.digest), body, where="m")

    def cp_a() -> None:
        subprocess.run(["cp", "-a", src, os.path.join(base, f"cp-{next(count)}")], check=True)

    variants: dict[str, tuple[Callable[[], None], bool]] = {
        "download, manifest parsed by the reference": (download(core=False), False),
        "download, manifest parsed by the core": (download(core=True), False),
        "parse alone, reference": (parse_reference, False),
        "parse alone, core": (parse_core, False),
        "one cp -a of the tree": (cp_a, True),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            work, child = variants[name]
            samples[name].append(timed(work, child=child))
        for leftover in os.listdir(base):
            if leftover.startswith(("dest-", "cp-")):
                shutil.rmtree(os.path.join(base, leftover))
    cp_cpu = statistics.median(cpu for _, cpu in samples["one cp -a of the tree"])
    rows: list[dict[str, Any]] = []
    print(f"{'variant':45} {'wall ms':>9} {'CPU ms':>9} {'CPU x cp -a':>12}")
    for name, found in samples.items():
        wall, cpu = statistics.median(w for w, _ in found), statistics.median(c for _, c in found)
        rows.append({"variant": name, "wall_ms": wall, "cpu_ms": cpu, "cpu_x_cp": cpu / cp_cpu, "samples": found})
        print(f"{name:45} {wall:9.1f} {cpu:9.1f} {cpu / cp_cpu:12.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}; manifest {len(body)} bytes")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"rounds": args.rounds, "load_average": os.getloadavg(), "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

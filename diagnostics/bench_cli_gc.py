"""What Python's cyclic garbage collector costs a CLI publish and download, and so what the CLI saves by
turning it off for its one operation (``artifactkit/cli/store.py::_without_cyclic_gc``).

``python3 diagnostics/bench_cli_gc.py [--files N] [--rounds R] [--output FILE]``: the scale corpus (N files x
256 B in directories of 100, tmpfs), then R paired rounds, each a publish into a fresh store and a download
into a fresh destination by the CLI *as shipped* and by the same CLI with the collector left on (its
``_without_cyclic_gc`` replaced by the identity before the parser is built), in alternating order. Each run is
a whole process under GNU ``time`` and ``taskset`` (every core): wall, user and system CPU, peak RSS. Reported:
the medians and the median of the paired ratios (shipped / collector on); user CPU is the steady figure on
a shared machine, wall time the one a user waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Final

from bench_corpus import build_corpus, scale_shape
from bench_env import code_state, cpu_set, environment, tmpfs_base

#: A child that runs the CLI's ``main`` in this interpreter, the collector left on when asked.
_CHILD: Final = """
import sys
if sys.argv[1] == "gc-on":
    import artifactkit.cli.store as store
    store._without_cyclic_gc = lambda build: build
from artifactkit.cli.main import main
sys.exit(main(sys.argv[2:]))
"""
VARIANTS: Final = ("shipped", "gc-on")


def _run(variant: str, args: list[str], cores: int, time_file: str) -> dict[str, Any]:
    cmd = [*cpu_set(cores), "/usr/bin/time", "-f", "%M %U %S", "-o", time_file, sys.executable, "-c", _CHILD,
           variant, *args]
    start = time.perf_counter_ns()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = (time.perf_counter_ns() - start) / 1e9
    if done.returncode != 0:
        raise SystemExit(f"{variant} {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    with open(time_file, encoding="ascii") as handle:
        peak_kib, user, system = handle.read().split()[-3:]
    return {"wall_s": round(wall, 3), "user_s": float(user), "sys_s": float(system),
            "peak_rss_mib": round(int(peak_kib) / 1024, 1)}


def measure(base: str, files: int, rounds: int, cores: int) -> dict[str, Any]:
    src = os.path.join(base, "src")
    build_corpus(src, "scale", *scale_shape(files))
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {v: {"publish": [], "download": []} for v in VARIANTS}
    for round_no in range(rounds + 1):  # round 0: the warm-up, not kept
        for variant in VARIANTS if round_no % 2 else VARIANTS[::-1]:
            store, dest = os.path.join(base, f"store-{variant}"), os.path.join(base, f"dest-{variant}")
            for path in (store, dest):
                shutil.rmtree(path, ignore_errors=True)
            time_file = os.path.join(base, "time.out")
            published = _run(variant, ["publish", "--store", store, "--name", "bench", src], cores, time_file)
            downloaded = _run(variant, ["download", "--store", store, "bench@1", dest], cores, time_file)
            if round_no:
                raw[variant]["publish"].append(published)
                raw[variant]["download"].append(downloaded)
    result: dict[str, Any] = {}
    for op in ("publish", "download"):
        shipped, gc_on = raw["shipped"][op], raw["gc-on"][op]
        result[op] = {
            variant: {field: statistics.median(s[field] for s in raw[variant][op])
                      for field in ("wall_s", "user_s", "sys_s", "peak_rss_mib")} for variant in VARIANTS}
        result[op]["paired_ratio_shipped_over_gc_on"] = {
            field: round(statistics.median(a[field] / b[field] for a, b in zip(shipped, gc_on, strict=True)), 3)
            for field in ("wall_s", "user_s")}
        result[op]["samples"] = {v: raw[v][op] for v in VARIANTS}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", help="the evidence JSON to write")
    a = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tmpfs_base() as (base, note):
        figures = measure(base, a.files, a.rounds, cores)
        env = environment(base, note)
    doc = {"schema": "artifactkit.bench-cli-gc/1",
           "command": " ".join(["python3", "diagnostics/bench_cli_gc.py", *sys.argv[1:]]),
           "files": a.files, "rounds": a.rounds, "cores": cores, "code": code_state(), "environment": env,
           "results": figures}
    for op in ("publish", "download"):
        r = figures[op]
        print(f"{op}: shipped {r['shipped']['wall_s']:.2f} s wall / {r['shipped']['user_s']:.2f} s user, "
              f"collector on {r['gc-on']['wall_s']:.2f} s / {r['gc-on']['user_s']:.2f} s; paired shipped/on "
              f"wall {r['paired_ratio_shipped_over_gc_on']['wall_s']}, user "
              f"{r['paired_ratio_shipped_over_gc_on']['user_s']}")
    if a.output:
        with open(a.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

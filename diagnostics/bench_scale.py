"""Scale (issue 28): a publish and a download of 100,000 files (1,000 dirs x 100 x 256 B, tmpfs) by whole CLI
processes, against ``cp -a`` of the same tree, with wall time and peak RSS.

Each run is the console script (``artifactkit publish`` / ``artifactkit download``, or ``python -m
artifactkit.cli`` where no script is installed) under ``taskset`` (all the CPUs the setup uses) and GNU
``time``, whose own process is tiny and fresh, so its ``%M`` is the CLI's peak RSS alone (``ru_maxrss`` of
a child forked from this big parent would start at the parent's). The wall time is this parent's clock
around the whole process: interpreter start, imports, the operation, exit. A round: a publish into a fresh
store, a download of that version into a fresh destination, and ``cp -a`` (first in odd rounds, last in
even ones); one untimed warm-up round first. The issue's figures for the code before it are kept as
:data:`TODAY`, the baseline the acceptance halves.

``bench_store.py`` runs it on the default engine with everything else; alone, on either engine:

    python3 diagnostics/bench_scale.py --engine python [--files 100000] [--rounds 3] --output FILE.json
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

from bench_corpus import build_corpus, scale_shape
from bench_env import child_env, cpu_set, environment, tmpfs_base

#: Issue 28's "today" (before the native core): whole CLI processes on the tmpfs of the machine it was filed on.
TODAY: Final = {"publish": {"wall_s": 6.0, "peak_rss_mb": 223}, "download": {"wall_s": 4.8, "peak_rss_mb": 168},
                "cp_a": {"wall_s": 3.8}}
OPS: Final = ("publish", "download", "cp_a")


def cli_command() -> list[str]:
    """The console script installed beside this interpreter, else the CLI as a module."""
    script = os.path.join(os.path.dirname(sys.executable), "artifactkit")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "artifactkit.cli"]


def _timed(cmd: list[str], cores: int, env: dict[str, str], rss_file: str) -> dict[str, Any]:
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


def bench_scale(base: str, files: int, rounds: int, cores: int, engine: str) -> dict[str, Any]:
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
                "cp_a": ["cp", "-a", src, copy]}
    raw: dict[str, list[dict[str, Any]]] = {op: [] for op in OPS}
    loads = []
    try:
        for round_no in range(rounds + 1):  # round 0: the warm-up, not kept
            loads.append([round(x, 2) for x in os.getloadavg()])
            for path in (store, dest, copy):
                if os.path.lexists(path):
                    shutil.rmtree(path)
            order = ("cp_a", "publish", "download") if round_no % 2 else ("publish", "download", "cp_a")
            for op in order:
                got = _timed(commands[op], cores, env, os.path.join(base, "scale.time"))
                if round_no:
                    raw[op].append(got)
    finally:
        for path in (src, store, dest, copy):
            if os.path.lexists(path):
                shutil.rmtree(path)
    return {"files": shape[0], "bytes_per_file": shape[1], "dirs": shape[2], "rounds": rounds, "cores": cores,
            "engine": engine, **said, "cli": [os.path.basename(cli[0]), *cli[1:]], "loadavg_per_round": loads[1:],
            "ops": {op: _summary(raw[op]) for op in OPS},
            "vs_cp_a": {op: round(statistics.median([a["wall_s"] / b["wall_s"] for a, b in zip(raw[op], raw["cp_a"],
                                                                                       strict=True)]), 3)
                        for op in ("publish", "download")},
            "today": TODAY}


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    peak_kib = max(s["peak_rss_kib"] for s in samples)

    def median(field: str) -> float:
        return round(statistics.median(s[field] for s in samples), 3)
    return {"samples_s": [s["wall_s"] for s in samples], "median_s": median("wall_s"), "user_s": median("user_s"),
            "sys_s": median("sys_s"),
            # MB as the issue writes it (10^6 bytes; GNU time's %M is KiB): the stricter reading of "223 MB".
            "peak_rss_mb": round(peak_kib * 1024 / 1e6, 1), "peak_rss_mib": round(peak_kib / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("native", "python"), default="native", help="ARTIFACTKIT_ENGINE")
    parser.add_argument("--files", type=int, default=100_000, help="files (default 100,000, the issue's)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds after the warm-up (default 3)")
    parser.add_argument("--output", required=True, help="the evidence JSON to write")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    with tmpfs_base() as (tmpfs, note):
        base = tempfile.mkdtemp(prefix="ak-scale-", dir=tmpfs)
        try:
            scale = bench_scale(base, args.files, args.rounds, cores, args.engine)
            env = environment(tmpfs, note)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    command = ["python3", "diagnostics/bench_scale.py", *(sys.argv[1:] if argv is None else argv)]
    doc = {"schema": "artifactkit.bench_scale/1", "command": " ".join(os.path.basename(a) if os.path.isabs(a) else a
                                                                       for a in command),
           "environment": env, "scale": scale}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    ops = scale["ops"]
    print(" ".join(f"{op}: {ops[op]['median_s']} s, {ops[op]['peak_rss_mb']} MB;" for op in OPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What holding openers costs: ns per open with no tracer, notifications only, and held; and diagnose's run time.

A child process opens and closes one file ``--opens`` times and times itself, in three places on the
filesystem of ``--dir``: beside the traced directory (what every other process on that mount pays),
inside it after its first open was held and named (an outside reader going on), and inside as the
tracer's own parent (answered first thing). The traced directory gets a mount of its own, as
``diagnose`` gives its work tree; ``--whole-mount`` marks the mount under it instead, as before.
Medians of ``--rounds`` rounds, the modes alternating within each round so drift hits all of them.
Then ``--diagnose-cycles`` cycles of ``diagnose`` on ``--dir``, with fanotify and without, alternating.

Writes diagnostics/results/bench-hold.json (sanitized) and prints two tables::

    python3 diagnostics/bench_hold.py --dir DIR [--opens 10000] [--rounds 5] [--diagnose-cycles 20]

Run as root.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
from bench_env import code_state  # the commit measured, as bench_store records it

from artifactkit.cli.common import table
from artifactkit.isolation.probe import probe_atime
from artifactkit.trace.engine import DiagnoseConfig, run_diagnose
from artifactkit.trace.evidence import write_evidence
from artifactkit.trace.tracer import FanotifyTracer, start_tracer

RESULTS = Path(__file__).resolve().parent / "results" / "bench-hold.json"
MODES = ("none", "notification", "permission")
PLACES = ("outside", "inside")
OPENER = """
import os, sys, time
path, count = sys.argv[1], int(sys.argv[2])
os.close(os.open(path, os.O_RDONLY))  # the first open (the one that may be held to name us) untimed
start = time.perf_counter_ns()
for _ in range(count):
    os.close(os.open(path, os.O_RDONLY))
print((time.perf_counter_ns() - start) // count)
"""


def _tracer(mode: str, traced: Path, whole_mount: bool) -> FanotifyTracer | None:
    return None if mode == "none" else start_tracer([traced], hold=mode == "permission", own_mount=not whole_mount)


def _opens_in_child(path: Path, count: int) -> int:
    done = subprocess.run([sys.executable, "-I", "-c", OPENER, str(path), str(count)], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def _opens_here(path: Path, count: int) -> int:
    import time  # noqa: PLC0415 - only this function times in-process

    start = time.perf_counter_ns()
    for _ in range(count):
        os.close(os.open(path, os.O_RDONLY))
    return (time.perf_counter_ns() - start) // count


def measure(directory: Path, opens: int, rounds: int, whole_mount: bool) -> dict[str, Any]:
    traced, other = directory / "traced", directory / "other"
    for where in (traced, other):
        where.mkdir()
        (where / "file").write_bytes(b"x")
    samples: dict[str, list[int]] = {f"{m}/{p}": [] for m in MODES for p in (*PLACES, "self")}
    holds: list[dict[str, int]] = []
    for _ in range(rounds):
        for mode in MODES:
            tracer = _tracer(mode, traced, whole_mount)
            try:
                samples[f"{mode}/outside"].append(_opens_in_child(other / "file", opens))
                samples[f"{mode}/inside"].append(_opens_in_child(traced / "file", opens))
                samples[f"{mode}/self"].append(_opens_here(traced / "file", opens))
            finally:
                report = tracer.stop() if tracer is not None else None
            if report is not None and report.hold.named_while_held:
                holds.append({"named": report.hold.named_while_held, "hold_us_max": report.hold.hold_us_max,
                              "hold_us_total": report.hold.hold_us_total})
    medians = {key: int(statistics.median(values)) for key, values in samples.items()}
    return {"ns_per_open_median": medians, "samples_ns": samples, "first_open_holds": holds}


def diagnose_runs(base: str, cycles: int, rounds: int) -> dict[str, Any]:
    """Wall time of ``diagnose`` with fanotify (held) and without, alternating."""
    took: dict[str, list[int]] = {"fanotify": [], "none": []}
    stats = []
    for _ in range(rounds):
        for mode in ("none", "fanotify"):
            result = run_diagnose(DiagnoseConfig(cycles=cycles, base=base, fanotify=mode == "fanotify"))
            took[mode].append(result.duration_ns // 1_000_000)
            if result.accesses.hold is not None:
                stats.append(attrs.asdict(result.accesses.hold) | {"competing_reads": result.competing_reads})
    return {"cycles": cycles, "duration_ms": took,
            "duration_ms_median": {m: int(statistics.median(v)) for m, v in took.items()}, "hold": stats}


def rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    med = doc["results"]["ns_per_open_median"]
    out = []
    for place, who in (("outside", "another process, beside the traced dir"),
                       ("inside", "an outside reader, already named"), ("self", "diagnose itself")):
        base = med[f"none/{place}"]
        out.append((who, *(f"{med[f'{m}/{place}']:,} ns ({med[f'{m}/{place}'] - base:+,})" for m in MODES)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="a directory on the mount to measure (a scratch dir is made)")
    parser.add_argument("--opens", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--whole-mount", action="store_true", help="mark the mount under the traced dir")
    parser.add_argument("--diagnose-cycles", type=int, default=20, help="0: skip the diagnose runs")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    probe = probe_atime(args.dir)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-hold-", dir=args.dir) as scratch:
        results = measure(Path(scratch), args.opens, args.rounds, args.whole_mount)
    if args.diagnose_cycles:
        results["diagnose"] = diagnose_runs(args.dir, args.diagnose_cycles, args.rounds)
    doc = {"schema": "artifactkit.bench-hold/1",
           "command": f"python3 diagnostics/bench_hold.py --dir <a directory on a {probe.fs_type} mount> "
                      f"--opens {args.opens} --rounds {args.rounds} --diagnose-cycles {args.diagnose_cycles}"
                      + (" --whole-mount" if args.whole_mount else ""),
           "code": code_state(),
           "environment": {"kernel": platform.release(), "machine": platform.machine(),
                           "python": platform.python_version(), "fs_type": probe.fs_type, "cpus": os.cpu_count(),
                           # Other work on the machine shifts these figures: the 1-minute load, before and after.
                           "loadavg_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]},
           "results": results}
    write_evidence(doc, args.output)
    print(table(rows(doc), ("opener", *(f"tracer: {m}" for m in MODES))))
    if "diagnose" in results:
        med = results["diagnose"]["duration_ms_median"]
        print(table([(f"diagnose, {args.diagnose_cycles} cycles", f"{med['none']:,} ms", f"{med['fanotify']:,} ms")],
                    ("run", "without fanotify", "with fanotify (held)")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Long fault campaign: SIGKILL at every counted call (several rounds) and at random times, a long
eight-process concurrency run, and the strace durability check; writes sanitized evidence.

Run as root from the repository root (it mounts a private noatime tmpfs; the harness is ``tests/support/``)::

    python -m diagnostics.fault_campaign --rounds 2 --random 150 --concurrency-s 20

Evidence: ``diagnostics/results/faults.json`` (schema ``artifactkit.faults/1``), with the command
inside. Exit 0 when every trial was consistent and nothing was lost, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from artifactkit.engine.select import ENGINE_SETTING, engine_info
from benches.env import code_state
from tests.support import crash as harness
from tests.support import fault_workers
from tests.support.durability import traced_publish
from tests.support.mounts import Mounts

ROOT = Path(__file__).resolve().parent.parent


def _kind(label: str) -> str:
    return label.split(" ", 1)[0] if label else "start"


def kill_campaign(materials: harness.Materials, work: Path, *, rounds: int, randoms: int,
                  seed: int, progress: bool) -> dict[str, Any]:
    recorded = {s: harness.record_points(materials, s, work / f"record-{s}") for s in harness.SCENARIOS}
    plan: list[tuple[str, int | None, str, float | None]] = []
    for _ in range(rounds):
        for scenario, (labels, _took) in recorded.items():
            plan += [(scenario, 0, "start", None)]
            plan += [(scenario, i, labels[i - 1], None) for i in range(1, len(labels) + 1)]
    rng = random.Random(seed)
    for index in range(randoms):
        scenario = harness.SCENARIOS[index % len(harness.SCENARIOS)]
        plan.append((scenario, None, "random-time", rng.uniform(0, recorded[scenario][1] / 1e9)))
    by_point: Counter[str] = Counter()
    by_scenario: Counter[str] = Counter()
    by_label: Counter[str] = Counter()
    problems: list[dict[str, Any]] = []
    killed = leftovers = 0
    started = time.monotonic()
    for number, (scenario, point, label, delay) in enumerate(plan):
        trial_dir = work / f"trial-{number}"
        result = harness.trial(materials, scenario, trial_dir, point=point, label=label, delay_s=delay)
        shutil.rmtree(trial_dir)
        kind = "random-time" if point is None else _kind(label)
        by_point[f"{scenario}:{kind}"] += 1
        by_scenario[scenario] += 1
        by_label[f"{scenario}: {label}"] += 1
        killed += result.killed
        leftovers += result.download_leftovers
        if result.problems:
            problems.append({"scenario": scenario, "point": point, "label": label,
                             "problems": [_sanitize(p, work) for p in result.problems]})
        if progress:
            print(f"\r{number + 1}/{len(plan)} trials, {len(problems)} inconsistent", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    return {
        "trials": len(plan), "killed": killed, "completed_before_random_kill": len(plan) - killed,
        "inconsistencies": len(problems), "problems": problems[:50],
        "points_per_run": {s: len(labels) + 1 for s, (labels, _) in recorded.items()},
        "run_ns": {s: took for s, (_, took) in recorded.items()},
        "by_scenario": dict(sorted(by_scenario.items())), "by_point_kind": dict(sorted(by_point.items())),
        "by_point": dict(sorted(by_label.items())),
        "download_staging_leftovers": leftovers, "seconds": round(time.monotonic() - started, 1),
    }


def durability(materials: harness.Materials) -> dict[str, Any]:
    """The suite's strace check on a correct publish and on each deliberately broken one."""
    if shutil.which("strace") is None:
        return {"skipped": "strace not installed (Debian package strace)"}
    found = {}
    for variant in ("correct", *fault_workers.BROKEN):  # every broken store the suite has, none forgotten
        problems, checked = traced_publish(materials, materials.base.parent, variant)
        found[variant] = {"visible_renames_checked": checked, "violations": len(problems),
                          "rules_broken": sorted({p.rsplit("(", 1)[-1].rstrip(")") for p in problems})}
    return found


def _command(args: argparse.Namespace) -> str:
    """How to run this again: the engine setting where one was given, every option, the output if not the default."""
    setting = f"{ENGINE_SETTING}={os.environ[ENGINE_SETTING]} " if os.environ.get(ENGINE_SETTING) else ""
    default = str(ROOT / "diagnostics" / "results" / "faults.json")
    options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(vars(args).items()) if k != "output")
    output = "" if args.output == default else f" --output {os.path.relpath(args.output, ROOT)}"
    return f"{setting}python -m diagnostics.fault_campaign {options}{output}"


def _sanitize(text: str, work: Path) -> str:
    return text.replace(str(work), "<work>").replace(str(ROOT), "<repo>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="kills at every counted call, this many times")
    parser.add_argument("--random", type=int, default=150, help="kills at random times")
    parser.add_argument("--concurrency-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--output", default=str(ROOT / "diagnostics" / "results" / "faults.json"))
    args = parser.parse_args(argv)
    progress = sys.stderr.isatty()
    with Mounts() as mounts:
        work = mounts.tmpfs("noatime", size="2g")
        materials = harness.prepare(work / "materials")
        kills = kill_campaign(materials, work, rounds=args.rounds, randoms=args.random, seed=args.seed,
                              progress=progress)
        trace = durability(materials)
        (work / "concurrency").mkdir()
        concurrency = fault_workers.run_concurrency(str(work / "concurrency-store"), str(work / "concurrency"),
                                                    duration_s=args.concurrency_s)
        concurrency["errors"] = [_sanitize(e, work) for e in concurrency["errors"]]
    concurrency["seconds"] = args.concurrency_s
    concurrency["processes"] = len(fault_workers.ROLES)
    concurrency["roles"] = list(fault_workers.ROLES)
    failed = (kills["inconsistencies"] or trace.get("correct", {}).get("violations")
              or any(concurrency[k] for k in ("error_count", "lost", "duplicated", "corrupt", "gc_removed_needed"))
              or not concurrency["final_verify_ok"])
    broken_caught = all(v["violations"] > 0 for k, v in trace.items() if k not in ("correct", "skipped"))
    output = Path(args.output)
    evidence = {
        "schema": "artifactkit.faults/1",
        "command": _command(args),
        "environment": {"kernel": platform.release(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "filesystem": "tmpfs (noatime, 2g)",
                        "engine": engine_info().describe(), "code_under_test": code_state()},
        "kill_trials": kills, "durability_strace": trace, "concurrency": concurrency,
        "verdict": "fail" if failed or not broken_caught else "pass",
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(evidence, indent=1, sort_keys=True) + "\n")
    print(f"{kills['trials']} kill trials ({kills['killed']} killed), {kills['inconsistencies']} inconsistent; "
          f"concurrency {concurrency['totals']}; durability {json.dumps(trace, sort_keys=True)}; "
          f"verdict {evidence['verdict']}")
    return 1 if evidence["verdict"] != "pass" else 0


if __name__ == "__main__":
    sys.exit(main())

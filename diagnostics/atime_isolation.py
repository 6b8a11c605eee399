"""Campaign: does atime isolation hold under competing readers, and what happens without it?

Runs ``{isolation flag, none} x {copier store, shutil}`` at 50 cycles, 1 ms interval and 4 competing
readers on the filesystem of ``--base`` (default: the system temp dir; on the machines this kit is
developed on that is the host's ext4, mounted relatime), and writes the sanitized evidence of all
four runs to ``diagnostics/results/artifact-atime-isolation.json``.

Run it as a file (``python3 diagnostics/atime_isolation.py``): the readers are ``spawn`` processes,
which import the main module again, so everything below sits behind the ``__main__`` guard.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from artifactkit.cli.common import table
from artifactkit.trace.engine import Copier, DiagnoseConfig, Isolation, run_diagnose
from artifactkit.trace.evidence import to_evidence, write_evidence

RESULTS = Path(__file__).resolve().parent / "results" / "artifact-atime-isolation.json"
MATRIX: tuple[tuple[Isolation, Copier], ...] = (("flag", "store"), ("flag", "shutil"),
                                                ("none", "store"), ("none", "shutil"))


def run_campaign(*, cycles: int, interval_ms: int, readers: int, base: str | None) -> dict[str, Any]:
    """Every cell of the matrix, in order; each run's document is ``artifactkit.diagnose/1``."""
    runs = []
    for isolation, copier in MATRIX:
        result = run_diagnose(DiagnoseConfig(cycles=cycles, interval_ms=interval_ms, readers=readers,
                                             isolation=isolation, copier=copier, base=base))
        runs.append({"isolation": isolation, "copier": copier, "exit_code": 0 if result.ok else 1,
                     "evidence": to_evidence(result)})
        print(f"isolation={isolation} copier={copier}: {result.failed_checks}/{result.checks} checks failed",
              file=sys.stderr)
    return {"schema": "artifactkit.diagnose-campaign/1", "campaign": "atime-isolation", "runs": runs}


def summary_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per run: the figures the README quotes."""
    rows: list[tuple[str, ...]] = []
    for run in doc["runs"]:
        ev = run["evidence"]
        diagnoses: dict[str, int] = {}
        for item in ev["mismatches"]:
            diagnoses[item["diagnosis"]] = diagnoses.get(item["diagnosis"], 0) + item["cycles"]
        env = ev["environment"]
        rows.append((run["isolation"], run["copier"], env["isolation"]["mode"], str(run["exit_code"]),
                     str(ev["checks"]), str(env["run"]["failed_checks"]),
                     ", ".join(f"{k} x{v}" for k, v in sorted(diagnoses.items())) or "-",
                     "yes" if env["run"]["source_atime_moved"] else "no",
                     str(ev["competing_reads"]), str(sum(ev["inotify"].values())),
                     str(ev["accesses"]["unexplained"])))
    return rows


HEADER = ("isolation", "copier", "mode", "exit", "checks", "failed", "mismatches by diagnosis",
          "source atime moved", "competing reads", "inotify events", "unexplained")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--interval-ms", type=int, default=1)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--base", default=None, help="directory on the filesystem to diagnose (default: temp dir)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    doc = run_campaign(cycles=args.cycles, interval_ms=args.interval_ms, readers=args.readers, base=args.base)
    # The equivalent command, with any --base/--output path left out: evidence names no paths.
    doc["command"] = (f"python3 diagnostics/atime_isolation.py --cycles {args.cycles} "
                      f"--interval-ms {args.interval_ms} --readers {args.readers}"
                      + (" --base <dir on the filesystem to diagnose>" if args.base else ""))
    write_evidence(doc, args.output)
    print(table(summary_rows(doc), HEADER))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue 13's outside reader, for real: ``diagnose`` while ``find BASE -type f -exec cat {} +`` loops beside it.

Makes BASE (a fresh directory on the filesystem of ``--on``, default the system temp dir), starts
the loop from the issue over it in a shell of its own, runs ``artifactkit diagnose --base BASE
--cycles N --output FILE`` as a user would, stops the loop, and writes the summary exactly as
printed plus the evidence document to diagnostics/results/outside-reader.json, with what the issue
asks checked: no "unknown (exited)", every unexplained event attributed to a named executable, the
summary within one screen (lines) and 100 columns. Root is needed for fanotify.

    python3 diagnostics/outside_reader.py [--cycles 20] [--on DIR]

Run it as a file: nothing here imports the spawn-based readers, but the CLI it starts does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_env import code_state  # the commit measured, as bench_store records it

from artifactkit.cli.diagnose import WIDTH
from artifactkit.trace.evidence import sanitize, write_evidence
from artifactkit.trace.procnames import UNKNOWN_EXITED

RESULTS = Path(__file__).resolve().parent / "results" / "outside-reader.json"
REPO = Path(__file__).resolve().parent.parent
LOOP = 'while :; do find "$1" -type f -exec cat {} + > /dev/null 2>&1; done'
#: One screen: what the issue means by "fits".
SCREEN_LINES = 40


def run(on: str, cycles: int) -> dict[str, Any]:
    base = tempfile.mkdtemp(prefix="outside-reader-", dir=on)
    evidence = os.path.join(on, f".{os.path.basename(base)}.json")
    loop = subprocess.Popen(["sh", "-c", LOOP, "sh", base], start_new_session=True)
    try:
        done = subprocess.run([sys.executable, "-m", "artifactkit.cli.main", "diagnose", "--base", base,
                               "--cycles", str(cycles), "--output", evidence],
                              cwd=REPO, capture_output=True, text=True, check=False)
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
        shutil.rmtree(base, ignore_errors=True)
    try:
        with open(evidence, encoding="utf-8") as handle:
            doc = json.load(handle)
    finally:
        if os.path.exists(evidence):
            os.unlink(evidence)
    summary = done.stdout.splitlines()
    acc = doc["accesses"]
    return {"exit_code": done.returncode, "stderr": done.stderr.strip(), "summary": summary, "evidence": doc,
            "checks": {
                "unknown_exited_in_summary": sum(UNKNOWN_EXITED in line for line in summary),
                "unknown_exited_in_evidence": sum(p["executable"] == UNKNOWN_EXITED for p in acc["attributed"]),
                "unexplained_events": acc["unexplained"],
                "attributed_events": sum(p["events"] for p in acc["attributed"]),
                "outside_processes": len(acc["attributed"]),
                "named_while_held": sum(p["named"] == "held" for p in acc["attributed"]),
                "groups": len(acc["groups"]),
                "summary_lines": len(summary), "summary_columns": max(map(len, summary), default=0),
                "fits_one_screen": len(summary) <= SCREEN_LINES and max(map(len, summary), default=0) <= WIDTH}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--on", default=tempfile.gettempdir(), help="where BASE is made (default: temp dir)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    result = run(args.on, args.cycles)
    doc = sanitize({"schema": "artifactkit.outside-reader/1",
                    "command": f"python3 diagnostics/outside_reader.py --cycles {args.cycles}"
                               + (" --on <dir>" if args.on != tempfile.gettempdir() else ""),
                    "outside_loop": LOOP.replace('"$1"', "BASE"),
                    "code": code_state(),
                    "diagnose_command": f"artifactkit diagnose --base BASE --cycles {args.cycles} --output FILE",
                    **result})
    write_evidence(doc, args.output)
    print("\n".join(doc["summary"]))
    print(json.dumps(doc["checks"], indent=2), file=sys.stderr)
    return 0 if doc["exit_code"] == 0 and doc["checks"]["unknown_exited_in_evidence"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

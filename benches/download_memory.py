"""Peak memory of a whole download of a large tree, made in parts and whole, beside ``cp -a`` (issue 52, item 2).

    python -m benches.download_memory --files N [--engine native --engine python] [--rounds R] [--output FILE]
    (from the repository root)

One run builds ``N`` files of 256 B in ``N / 100`` directories on a tmpfs of its own (root) or ``/dev/shm``,
publishes them once with the CLI, then, per engine and round, downloads the version twice as whole CLI processes
under GNU ``time`` (``%M``: peak RSS): in parts (the default, :data:`~artifactkit.manifest.tree_parts.PART_ENTRIES`
entries each) and whole (the part size set past the tree's, as every download was made before parts), with ``cp
-a`` of the source beside them, the order turning each round. Each output is removed off the clock.
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
from typing import Any

from artifactkit.manifest.tree_parts import PART_ENTRIES
from benches.env import code_state, tmpfs_base

_CLI = ("import sys; import artifactkit.manifest.tree_parts as parts; parts.PART_ENTRIES = int(sys.argv[1]); "
             "from artifactkit.cli.main import main; sys.exit(main(sys.argv[2:]))")
WHOLE = 10**15


def build(src: str, files: int) -> None:
    os.mkdir(src)
    for d in range(max(1, files // 100)):
        os.mkdir(f"{src}/d{d:05d}")
        for f in range(min(100, files - d * 100)):
            with open(f"{src}/d{d:05d}/f{f:03d}", "wb") as handle:
                handle.write(os.urandom(256))


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall seconds and peak RSS (MiB) of ``cmd`` under GNU time; refused if it fails."""
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%e %M", *cmd], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        wall, rss_kb = out.read().split()
    return {"wall_s": float(wall), "peak_rss_mib": round(int(rss_kb) / 1024, 1)}


def download(base: str, engine: str, part: int, label: str) -> dict[str, Any]:
    dest = os.path.join(base, f"out-{engine}-{label}")
    env = {**os.environ, "ARTIFACTKIT_ENGINE": engine}
    found = timed([sys.executable, "-c", _CLI, str(part), "download", "--store", f"{base}/store", "t", dest], env)
    shutil.rmtree(dest)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--engine", action="append", choices=["native", "python"])
    parser.add_argument("--rounds", type=int, default=1, help="rounds per engine (default %(default)s)")
    parser.add_argument("--output", help="evidence JSON (default: print it)")
    args = parser.parse_args(argv)
    # Each file a page: the source, the store (its blobs and tree objects) and one download at a time, a GiB spare.
    code = code_state()  # before: what ran, not what the tree holds once it ends
    with tmpfs_base(f"{-(-args.files * 4 * 4096 // (1 << 30)) + 1}g") as (mounted, note):
        base = tempfile.mkdtemp(prefix="ak-download-memory-", dir=mounted)
        runs = measure(base, args.files, args.engine or ["native"], args.rounds)
    doc = {"command": " ".join(["python -m benches.download_memory", *(argv or sys.argv[1:])]),
           "files": args.files, "bytes_per_file": 256, "dirs": max(1, args.files // 100), "where": note,
           "part_entries": PART_ENTRIES, "code": code, "loadavg_after": os.getloadavg(), "runs": runs}
    text = json.dumps(doc, indent=1) + "\n"
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(text)
    print(text, end="")
    return 0


def measure(base: str, files: int, engines: list[str], rounds: int) -> dict[str, Any]:
    """Build, publish once, then per engine and round: the two downloads and ``cp -a``, in an order that turns
    each round (the medians and each round's figures kept)."""
    try:
        build(f"{base}/src", files)
        subprocess.run([sys.executable, "-c", _CLI, str(PART_ENTRIES), "publish", "--store", f"{base}/store", "--name",
                        "t", f"{base}/src"], check=True, stdout=subprocess.DEVNULL)
        runs: dict[str, Any] = {}
        for engine in engines:
            found: dict[str, list[dict[str, Any]]] = {"parts": [], "whole": [], "cp_a": []}
            for turn in range(rounds):
                order = ["parts", "whole", "cp_a"]
                for label in order[turn % 3:] + order[:turn % 3]:
                    if label == "cp_a":
                        found[label].append(timed(["cp", "-a", f"{base}/src", f"{base}/copy"]))
                        shutil.rmtree(f"{base}/copy")
                    else:
                        found[label].append(download(base, engine, WHOLE if label == "whole" else PART_ENTRIES, label))
            runs[engine] = {label: {"median_wall_s": statistics.median(run["wall_s"] for run in each),
                                    "max_peak_rss_mib": max(run["peak_rss_mib"] for run in each), "rounds": each}
                            for label, each in found.items()}
        return runs
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

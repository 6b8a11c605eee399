"""Worker scaling of publish and download (issue 16): paired rounds per tree size and worker count.

    python3 diagnostics/bench_workers.py [--files 500 --files 2000 ...] [--workers 1 --workers 2 ...]
        [--rounds 7] [--output diagnostics/results/bench-workers.json]

For each tree size (N x 1 KiB files, 100 per directory, historical ns times, on /dev/shm) and each worker
count, one fresh child process per measurement publishes into a fresh store and downloads into a fresh
destination with ``workers=W`` given explicitly (so the pool is used even below the automatic threshold:
that is how the threshold is measured). Rounds alternate the order of the worker counts. Prints the median
ms of each, files/s, files/s per worker and the speed-up over one worker, and keeps every sample.
Correctness is not measured here (the tests prove the worker path exact); this is the cost.

It also measures the machine's own ceiling (``--ceiling-rounds``, 0 to skip): W copies of the same fixed job
started at once, against one alone, as ``W x alone / together`` (what W processes with no shared work at all
gain here). Two jobs: a pure-Python loop (CPU) and creating, writing and removing 1 KiB files, each process in
a directory of its own (kernel metadata work, as a download does). A virtual machine whose vCPUs share a
physical core, or a host under load, shows a ceiling well below W, and no worker pool can beat it.
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

from bench_env import code_state, scratch_on_tmpfs
from bench_revisions import make_tree

CHILD = r"""
import os, sys, time
from artifactkit import Store
src, base, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(os.path.join(base, "store"))
t0 = time.perf_counter_ns(); ref = store.publish(src, "m", workers=workers); t1 = time.perf_counter_ns()
store.download(ref, os.path.join(base, "out"), workers=workers); t2 = time.perf_counter_ns()
print((t1 - t0) // 1000, (t2 - t1) // 1000)
"""


CEILING_CHILD = r"""
import os, sys, time
job, where = sys.argv[1], sys.argv[2]
t0 = time.perf_counter_ns()
if job == "cpu":
    total = 0
    for i in range(3_000_000):
        total += i
else:
    os.mkdir(where)
    data = bytes(1024)
    for i in range(3000):
        fd = os.open(f"{where}/f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
    for i in range(3000):
        os.unlink(f"{where}/f{i}")
    os.rmdir(where)
print((time.perf_counter_ns() - t0) // 1000)
"""


def _together(job: str, copies: int, root: str) -> int:
    """Microseconds until the slowest of ``copies`` simultaneous runs of ``job`` finished."""
    procs = [subprocess.Popen([sys.executable, "-S", "-c", CEILING_CHILD, job, os.path.join(root, f"ceiling-{n}")],
                              stdout=subprocess.PIPE, text=True) for n in range(copies)]
    return max(int(proc.communicate()[0]) for proc in procs)


def ceiling(counts: list[int], rounds: int, root: str) -> dict[str, dict[str, float]]:
    """Per job and worker count: the median ``W x alone / together`` of paired rounds."""
    result: dict[str, dict[str, float]] = {}
    for job in ("cpu", "files"):
        ratios: dict[int, list[float]] = {w: [] for w in counts if w > 1}
        for _ in range(rounds):
            alone = _together(job, 1, root)
            for workers, found in ratios.items():
                found.append(workers * alone / _together(job, workers, root))
        result[job] = {str(w): round(statistics.median(r), 2) for w, r in ratios.items()}
        print(f"ceiling {job}: " + " ".join(f"{w} processes {v}x" for w, v in result[job].items()), flush=True)
    return result


def _row(files: int, workers: int, values: list[tuple[int, int]], one: dict[str, float] | None) -> dict[str, float]:
    publish = statistics.median(p for p, _ in values) / 1000
    download = statistics.median(d for _, d in values) / 1000
    row = {"files": files, "workers": workers, "publish_ms": publish, "download_ms": download,
           "publish_files_per_s": round(files / publish * 1000), "download_files_per_s": round(files / download * 1000),
           "publish_files_per_s_per_worker": round(files / publish * 1000 / workers),
           "download_files_per_s_per_worker": round(files / download * 1000 / workers)}
    if one is not None:
        row["publish_speedup"] = round(one["publish_ms"] / publish, 2)
        row["download_speedup"] = round(one["download_ms"] / download, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, action="append", help="tree sizes (default 500 1000 2000 5000 10000)")
    parser.add_argument("--workers", type=int, action="append", help="worker counts (default 1 2)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", help="write the samples and the table as JSON here")
    parser.add_argument("--ceiling-rounds", type=int, default=9, help="rounds of the machine's ceiling (0: skip)")
    args = parser.parse_args(argv)
    sizes, counts = args.files or [500, 1000, 2000, 5000, 10_000], args.workers or [1, 2]
    rows, samples, loads = [], {}, []
    with scratch_on_tmpfs() as root:
        limits = ceiling(counts, args.ceiling_rounds, root) if args.ceiling_rounds else None
        for files in sizes:
            src = os.path.join(root, f"src-{files}")
            make_tree(src, files)
            got: dict[int, list[tuple[int, int]]] = {w: [] for w in counts}
            for rnd in range(args.rounds):
                loads.append(os.getloadavg()[0])
                for workers in counts if rnd % 2 == 0 else list(reversed(counts)):
                    base = tempfile.mkdtemp(dir=root)
                    env = {k: v for k, v in os.environ.items() if k != "ARTIFACTKIT_WORKERS"}
                    out = subprocess.run([sys.executable, "-c", CHILD, src, base, str(workers)], env=env,
                                         capture_output=True, text=True, check=True).stdout.split()
                    got[workers].append((int(out[0]), int(out[1])))
                    shutil.rmtree(base)
            shutil.rmtree(src)
            one = None
            for workers in counts:
                row = _row(files, workers, got[workers], one)
                one = one or (row if workers == 1 else None)
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            samples[str(files)] = {str(w): v for w, v in got.items()}
    if args.output:
        doc = {"schema": "artifactkit.bench-workers/1",
               "command": "python3 diagnostics/bench_workers.py " + " ".join(
                   os.path.basename(a) if os.path.isabs(a) else a for a in (argv or sys.argv[1:])),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                           "kernel": os.uname().release, "python": sys.version.split()[0]},
               "code_under_test": code_state(), "rounds": args.rounds, "loadavg_1m_per_round": loads,
               "rows": rows, "samples_us": samples, "machine_ceiling": limits}
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

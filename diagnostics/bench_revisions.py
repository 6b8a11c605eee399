"""Paired timing of publish + download of one tree with two checkouts of artifactkit (before/after a change).

    git worktree add /tmp/ak-old <REV>
    python3 diagnostics/bench_revisions.py --old /tmp/ak-old --new . [--rounds 7] [--files 10000]

Builds ``--files`` x 1 KiB files in 100 dirs with historical ns times on /dev/shm, then runs, alternating
which goes first, one child process per measurement with ``PYTHONPATH`` set to each checkout, and prints the
median ms of publish and of download for each, with every sample. A quick check that a refactor did not make
the code path slower; ``bench_store.py`` is the full benchmark against peers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_env import scratch_on_tmpfs

CHILD = r"""
import os, sys, time
from artifactkit import Store
src, base = sys.argv[1], sys.argv[2]
store = Store(os.path.join(base, "store"))
t0 = time.perf_counter_ns(); ref = store.publish(src, "m"); t1 = time.perf_counter_ns()
store.download(ref, os.path.join(base, "out")); t2 = time.perf_counter_ns()
print((t1 - t0) // 1000, (t2 - t1) // 1000)
"""


def make_tree(src: str, files: int) -> None:
    os.mkdir(src)
    per_dir = max(1, files // 100)
    for d in range((files + per_dir - 1) // per_dir):
        os.mkdir(f"{src}/d{d}")
        for f in range(min(per_dir, files - d * per_dir)):
            path = f"{src}/d{d}/f{f}"
            with open(path, "wb") as handle:
                handle.write(os.urandom(1024))
            os.utime(path, ns=(1_000_000_000_123_456_789, 1_100_000_000_987_654_321))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="checkout of the earlier revision")
    parser.add_argument("--new", required=True, help="checkout of the later revision")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args(argv)
    with scratch_on_tmpfs() as root:
        src = os.path.join(root, "src")
        make_tree(src, args.files)
        samples: dict[str, list[tuple[int, int]]] = {"old": [], "new": []}
        for rnd in range(args.rounds):
            for label in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
                base = tempfile.mkdtemp(dir=root)
                env = {**os.environ, "PYTHONPATH": os.path.abspath(getattr(args, label))}
                out = subprocess.run([sys.executable, "-c", CHILD, src, base], env=env, capture_output=True,
                                     text=True, check=True).stdout.split()
                samples[label].append((int(out[0]), int(out[1])))
                shutil.rmtree(base)
        for label, values in samples.items():
            print(f"{label}: publish median {statistics.median(p for p, _ in values) / 1000:.0f} ms, download median "
                  f"{statistics.median(d for _, d in values) / 1000:.0f} ms; samples (us) {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

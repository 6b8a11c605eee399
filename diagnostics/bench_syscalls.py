"""Syscalls per file: ``strace -f -c`` of one publish (new content) and one download of a corpus, per engine
setup, net of an idle child's start-up (the same imports, the same engine, no operation), divided by files.

``-f`` follows the core's threads. The allocator's and the scheduler's calls (``mmap``, ``futex``, ...) and a
thread's start (``clone3``, ``rseq``, ``set_robust_list``) are left out: they are not per-file work (threads
started are counted apart). The flushes are counted apart too: a publish must make exactly one ``syncfs``
barrier before any blob is visible.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Final

from bench_rounds import Bench, Cell, Setup

NOISE: Final = frozenset({"mmap", "munmap", "mremap", "brk", "mprotect", "madvise", "futex", "rseq",
                          "set_robust_list", "sched_yield", "clone", "clone3"})
FLUSHES: Final = ("fsync", "fdatasync", "syncfs")


def strace_counts(path: str) -> dict[str, int]:
    """``-U calls,name`` output: one ``COUNT NAME`` line per syscall, then the total."""
    counts = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1] != "total":
                counts[fields[1]] = int(fields[0])
    return counts


def syscalls(bench: Bench, chosen: list[Setup], scratch: str) -> dict[str, Any]:
    """Per setup: publish and download, syscalls per file net of start-up, by name, and the flushes."""
    if shutil.which("strace") is None:
        return {"skipped": "strace not installed"}
    files = bench.shape[0]
    found: dict[str, Any] = {}
    for setup in chosen:
        counts = {}
        for op in ("noop", "publish", "download"):
            out = os.path.join(scratch, f"strace-{setup.name}-{op}.txt")
            bench.run(Cell(setup.name, op, setup.engine, setup.threads, setup.cores), strace_out=out)
            counts[op] = strace_counts(out)
            os.unlink(out)
        found[setup.name] = {}
        for op in ("publish", "download"):
            net = {k: counts[op].get(k, 0) - counts["noop"].get(k, 0) for k in set(counts[op]) - NOISE}
            net = {k: v for k, v in sorted(net.items(), key=lambda kv: (-kv[1], kv[0])) if v}
            found[setup.name][op] = {
                "net_total": sum(net.values()), "per_file": round(sum(net.values()) / files, 2),
                "flushes": {k: counts[op].get(k, 0) - counts["noop"].get(k, 0) for k in FLUSHES},
                "threads_started": counts[op].get("clone3", 0) + counts[op].get("clone", 0)
                - counts["noop"].get("clone3", 0) - counts["noop"].get("clone", 0),
                "by_name": net, "per_file_by_name": {k: round(v / files, 2) for k, v in net.items()}}
    return found

"""Paired rounds on one corpus: every engine setup and every peer, each run a fresh child (``child.py``); and the
system calls per file of one publish and one download per setup (``strace``).

A *setup* is an engine at a thread count under a CPU set of that size: ``native-1t`` (``workers=1``, ``taskset
-c 0``), ``native-2t`` (``workers=2``, ``taskset -c 0,1``), ``python`` (the reference, one process, one core).
The peers run under each CPU set a setup uses, so every ratio compares runs under the same conditions. A
*cell* is one (setup or peer set, operation); a round runs every cell once, rounds alternate forward and
reversed order (each pair runs A-before-B in half the rounds), and each ratio is the median of the per-round
ratios. Publish and round trip get a fresh store each run, every run a fresh destination; the downloads read a
store published afresh at the start of each round (untimed, by the reference). Page cache warm (one untimed
warm-up of every cell), ``sync`` before each run, off the clock.

Syscalls per file: ``strace -f -c`` of one publish (new content) and one download of a corpus, per engine
setup, net of an idle child's start-up (the same imports, the same engine, no operation), divided by files.

``-f`` follows the core's threads. The allocator's and the scheduler's calls (``mmap``, ``futex``, ...) and a
thread's start (``clone3``, ``rseq``, ``set_robust_list``) are left out: they are not per-file work (threads
started are counted apart). The flushes are counted apart too: a publish must make exactly one ``syncfs``
barrier before any blob is visible.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from typing import Any, Final, NamedTuple

from benches.env import MIB, build_corpus, child_env, cpu_set, reset_source_atimes

#: Run as a file, never as ``benches.child``: a child given ``PYTHONPATH`` (another revision) must import that
#: revision's package, and ``-m`` would put the working directory ahead of it.
CHILD: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
AK_OPS: Final = ("publish", "download", "roundtrip")
PEERS: Final = ("cp_a", "rsync", "copytree")
LARGE_OPS: Final = ("publish", "download")
LARGE_PEERS: Final = ("cp_a", "sha256")
#: kernel_bound.c's publish and download calls alone (no sha256, no Python), a thread per CPU of the peer set.
CALLS: Final = ("calls_publish", "calls_download")


class Setup(NamedTuple):
    """An engine at a thread count, under a CPU set of ``cores`` CPUs."""

    name: str
    engine: str
    threads: int
    cores: int


class Cell(NamedTuple):
    group: str  # a setup's name, or "peers-Nc"
    op: str
    engine: str | None  # None: a peer
    threads: int
    cores: int

    @property
    def key(self) -> str:
        return f"{self.group}/{self.op}"


def setups(threads: list[int]) -> list[Setup]:
    """The native core at each thread count (on as many CPUs), and the reference on one."""
    return [*(Setup(f"native-{t}t", "native", t, t) for t in sorted(set(threads))), Setup("python", "python", 1, 1)]


def cells(corpus: str, chosen: list[Setup], *, calls: bool = False) -> list[Cell]:
    ops, peers = (LARGE_OPS, LARGE_PEERS) if corpus == "large" else (AK_OPS, PEERS + (CALLS if calls else ()))
    found = [Cell(s.name, op, s.engine, s.threads, s.cores) for s in chosen for op in ops]
    for cores in sorted({s.cores for s in chosen}):
        found += [Cell(f"peers-{cores}c", op, None, 1, cores) for op in peers]
    return found


def run_child(cell: Cell, task: dict[str, Any], strace_out: str | None = None, *,
              package: str | None = None) -> dict[str, Any]:
    """One fresh child under the cell's CPU set and engine; its JSON line, checked for the engine asked.
    ``package``: a directory holding another ``artifactkit`` to import (``bench_core_ab.py``), run from there
    so it comes first on ``sys.path``."""
    cmd = [*cpu_set(cell.cores), sys.executable, CHILD, json.dumps({**task, "op": cell.op})]
    if strace_out is not None:
        cmd = ["strace", "-f", "-c", "-U", "calls,name", "-o", strace_out, *cmd]
    env = child_env(cell.engine or "python")
    if package is not None:
        env["PYTHONPATH"] = package
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=package)
    if done.returncode != 0:
        raise RuntimeError(f"{cell.key} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if cell.engine is not None and result["engine"] != cell.engine:
        raise RuntimeError(f"{cell.key}: asked for the {cell.engine} engine, the child used {result['engine']}")
    return result


def _clean(*paths: str) -> None:
    for path in paths:
        if os.path.lexists(path):
            shutil.rmtree(path)


class Bench:
    """One corpus on the tmpfs ``base``: its tree, its download store, and how a cell is run."""

    def __init__(self, base: str, name: str, shape: tuple[int, int, int], *, source_atime: str,
                 kernel_bound: str | None = None) -> None:
        self.name, self.shape, self.as_given = name, shape, source_atime == "as-given"
        self.src, self.dest = os.path.join(base, f"corpus-{name}"), os.path.join(base, "out")
        self.fresh, self.published = os.path.join(base, "store-fresh"), os.path.join(base, f"store-{name}")
        # The calls alone: kernel_bound.c's own staging and blobs/ (blobs named by index), made once, untimed.
        self.kernel_bound = kernel_bound if name != "large" else None
        self.calls_seed = os.path.join(base, f"calls-seed-{name}")
        build_corpus(self.src, name, *shape)
        self.fresh_download_store()
        if self.kernel_bound:
            _clean(self.calls_seed)
            os.mkdir(self.calls_seed)
            subprocess.run([self.kernel_bound, "publish", self.src, self.calls_seed, "1", "threads"], check=True,
                           stdout=subprocess.DEVNULL)

    def fresh_download_store(self) -> None:
        """The store the downloads read, published anew (untimed, by the reference): one per round."""
        _clean(self.published)
        self.run(Cell("prepare", "publish", "python", 1, 1), store=self.published)

    def run(self, cell: Cell, *, store: str | None = None, strace_out: str | None = None,
            **extra: Any) -> dict[str, Any]:
        _clean(self.dest, self.fresh, os.path.join(self.calls_seed, "dest"))
        if self.as_given:
            reset_source_atimes(self.src)
        os.sync()  # no run pays to write back another's dirty pages
        target = store or (self.published if cell.op == "download" else self.fresh)
        task = {"src": self.src, "dest": self.dest, "store": target, **extra}
        if cell.engine is not None:
            task["workers"] = cell.threads  # the reference: 1 = this process (no process pool, where one exists)
        if cell.op in CALLS:
            task.update(kernel_bound=self.kernel_bound, calls_seed=self.calls_seed, calls_workers=cell.cores)
        return run_child(cell, task, strace_out)

    def close(self) -> None:
        _clean(self.dest, self.fresh, self.src, self.published, self.calls_seed)


def bench_corpus(bench: Bench, chosen: list[Setup], rounds: int, *, profile: Setup | None) -> dict[str, Any]:
    """Every cell of the corpus ``rounds`` times, paired; the summaries, ratios, speed-ups and digests."""
    todo = cells(bench.name, chosen, calls=bench.kernel_bound is not None)
    # Warm-up, untimed: page cache, relatime's one atime update per source file, the peers' RSS (GNU time).
    # Peers first: their reads move the source's atimes once, before any publish records them.
    warm = {c.key: bench.run(c, measure_rss=shutil.which("time") is not None)
            for c in sorted(todo, key=lambda c: c.engine is not None)}
    raw: dict[str, list[dict[str, Any]]] = {c.key: [] for c in todo}
    loads = []
    for round_no in range(rounds):
        bench.fresh_download_store()
        loads.append([round(x, 2) for x in os.getloadavg()])  # a busy shared machine shows here
        for cell in todo if round_no % 2 == 0 else list(reversed(todo)):
            raw[cell.key].append(bench.run(cell))
    files, size, dirs = bench.shape
    result: dict[str, Any] = {
        "files": files, "bytes_per_file": size, "dirs": dirs, "rounds": rounds, "loadavg_per_round": loads,
        "cells": {c.key: {"group": c.group, "op": c.op, "engine": c.engine, "threads": c.threads,
                          "cores": c.cores, **summary(raw[c.key], warm[c.key], files, size, c.threads)}
                  for c in todo},
        "vs_cp_a": {c.key: _paired(raw[c.key], raw[f"peers-{c.cores}c/cp_a"])
                    for c in todo if c.op not in {"cp_a", "sha256"}},
        "digests_per_round": _digests(todo, raw, rounds),
    }
    if bench.name == "large":
        result["share_of_sha256"] = {c.key: _paired(raw[f"peers-{c.cores}c/sha256"], raw[c.key])
                                     for c in todo if c.engine is not None}
    natives = sorted((s for s in chosen if s.engine == "native"), key=lambda s: s.threads)
    if len(natives) > 1:
        low, high = natives[0], natives[-1]
        result["speedup"] = {op: {"from": low.name, "to": high.name,
                                  **_paired(raw[f"{low.name}/{op}"], raw[f"{high.name}/{op}"])}
                             for op in (LARGE_OPS if bench.name == "large" else AK_OPS)}
        if bench.kernel_bound:  # the same rounds' calls alone, one thread under low's CPUs -> one per high's CPU
            one, most = f"peers-{low.cores}c", f"peers-{high.cores}c"
            result["calls_speedup"] = {op: {"from": one, "to": most, **_paired(raw[f"{one}/{op}"], raw[f"{most}/{op}"])}
                                       for op in CALLS}
    if profile is not None:
        result["profile"] = {op: bench.run(Cell(profile.name, op, profile.engine, profile.threads, profile.cores),
                                           profile=True)["profile"] for op in ("publish", "download")}
    return result


def _paired(top: list[dict[str, Any]], bottom: list[dict[str, Any]]) -> dict[str, float]:
    """Median of the per-round ratios top/bottom (wall and CPU), and the ratio of the medians."""
    def ratio(field: str) -> float:
        return round(statistics.median(a[field] / b[field] for a, b in zip(top, bottom, strict=True)), 3)
    return {"paired_median": ratio("ns"), "cpu_paired_median": ratio("cpu_ns"),
            "of_medians": round(statistics.median(a["ns"] for a in top) / statistics.median(b["ns"] for b in bottom),
                                3)}


def _digests(todo: list[Cell], raw: dict[str, list[dict[str, Any]]], rounds: int) -> list[dict[str, str]]:
    """Per round, the manifest digest each engine setup's publish and round trip made of the same tree."""
    return [{c.key: raw[c.key][r]["digest"] for c in todo if raw[c.key][r].get("digest")} for r in range(rounds)]


def summary(samples: list[dict[str, Any]], warm: dict[str, Any], files: int, size: int,
            threads: int) -> dict[str, Any]:
    def median_ms(field: str) -> float:
        return round(statistics.median(s[field] for s in samples) / 1e6, 3)

    wall_s = median_ms("ns") / 1e3
    peaks = [s["peak_rss_kib"] for s in [warm, *samples] if s.get("peak_rss_kib") is not None]
    found: dict[str, Any] = {
        "samples_ms": [round(s["ns"] / 1e6, 3) for s in samples], "median_ms": median_ms("ns"),
        "min_ms": round(min(s["ns"] for s in samples) / 1e6, 3),
        "max_ms": round(max(s["ns"] for s in samples) / 1e6, 3),
        "cpu_ms": median_ms("cpu_ns"), "user_ms": median_ms("user_ns"), "sys_ms": median_ms("sys_ns"),
        "files_per_s": round(files / wall_s, 1), "files_per_s_per_thread": round(files / wall_s / threads, 1),
        "mib_per_s": round(files * size / MIB / wall_s, 1),
        "peak_rss_mib": round(max(peaks) / 1024, 1) if peaks else None,
        "baseline_rss_mib": round(min(s["base_rss_kib"] for s in samples) / 1024, 1),
        "engine_reported": sorted({s["engine"] for s in samples}),
    }
    if all("core_ns" in s for s in samples):
        found["core_ms"] = median_ms("core_ns")  # inside the native core
        found["threaded_ms"] = median_ms("threaded_ns")  # inside its calls that run on threads
        # The rest: one Python thread, and the core's single-threaded calls. Per round, then the median.
        found["serial_ms"] = round(statistics.median((s["ns"] - s["threaded_ns"]) / 1e6 for s in samples), 3)
        found["core_calls"] = {name: max(s["core"].get(name, {}).get("calls", 0) for s in samples)
                               for name in sorted({n for s in samples for n in s["core"]})}
    return found


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

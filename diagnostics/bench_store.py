"""Paired benchmark of the store against the tools users would otherwise pick (issues 7 and 16).

    python3 diagnostics/bench_store.py [--quick] [--repeats N] [--cores N ...] [--source-atime settled|as-given]
    python3 diagnostics/bench_store.py --table-from diagnostics/results/bench-store.json

Corpora (deterministic content, historical ns times, built with ``artifactkit.conformance.corpus``): ``small``
128 x 16 KiB in 4 dirs, ``many`` 10,000 x 1 KiB in 100 dirs, ``large`` one 256 MiB file; on the
default temp filesystem and on a tmpfs mounted here when root. Every measurement is a fresh child
process (clean peak RSS, no warm Python state shared between operations); the clock runs inside the
child, after imports, around the operation alone: the library call, or ``subprocess.run`` for
``cp``/``rsync`` (their fork+exec is part of what a user pays). Page cache is warm (one untimed
warm-up of every operation first) and ``sync`` runs before each measurement, so no operation pays to
write back another's dirty pages. Each round runs every operation once; rounds alternate forward and
reversed order, so every pair runs A-before-B in half the rounds. Ratios are medians of the
per-round ratios (paired), next to the ratio of medians.

Every child, peer or ours, runs under the same conditions: the same ``taskset`` CPU set (``--cores``:
1 and all cores by default, so files/s per core is measured, not assumed), the same source state
(``--source-atime``: the atimes the warm-up left, or the corpus's historical atimes put back before
each run), the same ``sync`` before the clock, and the clock around the operation only. Each sample
also records the CPU time (user + system, the op's threads and the tools it ran), which other load on
a shared machine inflates far less than the wall clock; the 1-minute load average is kept per round.
"publish again (stat cache)" is ``publish(..., stat_cache=True)`` of the unchanged tree into a store
whose cache the previous publish wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

from bench_env import CORPUS_TIMES, MIB, command_line, cpu_set, environment, locations, reset_source_atimes
from bench_tables import AK_OPS, CORPORA, PEERS, QUICK_CORPORA, render_tables, targets
from docs_tables import rerender, write_table

SCHEMA: Final = "artifactkit.bench-store/2"
DEFAULT_OUTPUT: Final = "diagnostics/results/bench-store.json"
# (files, bytes per file, directories); quick mode shrinks them so a smoke run takes seconds.
NOISE: Final = frozenset({"mmap", "munmap", "mremap", "brk", "mprotect", "madvise", "futex"})
FLUSHES: Final = ("fsync", "fdatasync", "syncfs")
EXTERNAL: Final = frozenset({"cp_a", "rsync", "cp_a_sha256"})


# -- the child: one measured operation ---------------------------------------------------------

def _sha256_tree(root: str) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as handle:
                hashlib.file_digest(handle, "sha256")


def _tool(cmd: list[str], rss_file: str | None) -> None:
    # GNU time's own process is tiny and fresh, so the %M it reports is the tool's peak alone.
    prefix = ["/usr/bin/time", "-f", "%M", "-o", rss_file] if rss_file else []
    subprocess.run([*prefix, *cmd], check=True)


def _operate(op: str, src: str, dest: str, store_root: str, rss_file: str | None) -> None:
    from artifactkit.store.store import Store  # noqa: PLC0415 - imported before the clock starts (see worker)

    if op in ("ak_publish", "ak_republish"):
        Store(store_root).publish(src, "bench")
    elif op == "ak_republish_cached":
        Store(store_root).publish(src, "bench", stat_cache=True)
    elif op == "ak_download":
        Store(store_root).download("bench@1", dest)
    elif op == "ak_roundtrip":
        store = Store(store_root)
        store.download(store.publish(src, "bench"), dest)
    elif op in ("cp_a", "cp_a_sha256"):
        _tool(["cp", "-a", src, dest], rss_file)
        if op == "cp_a_sha256":
            _sha256_tree(src)
    elif op == "rsync":
        _tool(["rsync", "-a", "--atimes", src + "/", dest + "/"], rss_file)
    elif op == "copytree":
        shutil.copytree(src, dest, symlinks=True)
    elif op == "sha256":
        _sha256_tree(src)
    elif op != "noop":
        raise ValueError(f"unknown operation {op!r}")


def _profile_top(profile: Any, limit: int = 15) -> list[dict[str, Any]]:
    import pstats  # noqa: PLC0415 - only the profiling child needs it

    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{os.path.basename(filename)}:{line}({func})", "calls": calls,
                     "tottime_ms": round(tottime * 1e3, 2), "cumtime_ms": round(cumtime * 1e3, 2)})
    return sorted(rows, key=lambda row: -row["tottime_ms"])[:limit]


def _vm_hwm_kib() -> int:
    # VmHWM belongs to this process's own address space, which exec made fresh. ru_maxrss does not:
    # Linux carries the forking process's high-water mark across fork+exec into the child's.
    with open("/proc/self/status", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith("VmHWM:")).split()[1])


def _cpu_s() -> float:
    # user + system of this process (all its threads) and of the tools it ran and waited for: the CPU
    # the op used, which other load on a shared machine inflates far less than the wall clock.
    # getrusage counts in microseconds (os.times() in 10 ms clock ticks: too coarse for `small`).
    own, tools = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + tools.ru_utime + tools.ru_stime


def worker(task: dict[str, Any]) -> dict[str, Any]:
    import artifactkit.store.store  # noqa: F401, PLC0415 - the import (ctypes, find_library) stays off the clock

    base_rss = _vm_hwm_kib()  # interpreter + imports: the high-water mark before the op
    external = task["op"] in EXTERNAL
    rss_file = os.path.join(task["dest"] + ".rss") if external and task.get("measure_rss") else None
    profile = None
    if task.get("profile"):
        import cProfile  # noqa: PLC0415

        profile = cProfile.Profile()
        profile.enable()
    cpu_before = _cpu_s()
    start = time.perf_counter_ns()
    _operate(task["op"], task["src"], task["dest"], task["store"], rss_file)
    elapsed = time.perf_counter_ns() - start
    cpu_ns = int((_cpu_s() - cpu_before) * 1e9)
    if profile is not None:
        profile.disable()
    peak: int | None = _vm_hwm_kib()
    if external:  # cp/rsync: their own peak, known only from a GNU time run (untimed: time adds an exec)
        peak = None
        if rss_file:
            with open(rss_file, encoding="ascii") as handle:
                tool_peak = int(handle.read().split()[-1])
            os.unlink(rss_file)
            peak = max(tool_peak, _vm_hwm_kib()) if task["op"] == "cp_a_sha256" else tool_peak
    result: dict[str, Any] = {"ns": elapsed, "cpu_ns": cpu_ns, "peak_rss_kib": peak, "base_rss_kib": base_rss}
    if profile is not None:
        result["profile"] = _profile_top(profile)
    return result


# -- the parent: corpora, locations, rounds ----------------------------------------------------

def build_corpus(dest: str, name: str, files: int, size: int, dirs: int) -> None:
    from artifactkit.conformance.corpus import content, materialize, parse_tree  # noqa: PLC0415
    from artifactkit.metadata.times import set_times_exact  # noqa: PLC0415

    times = dict(CORPUS_TIMES)
    if size > 64 * MIB:
        # corpus.content() is random.randbytes, which cannot make 256 MiB at once (a C int of bits):
        # the same deterministic bytes, 1 MiB per seed, and times set and read back exactly.
        os.mkdir(dest, 0o755)
        path = os.path.join(dest, "f00000.bin")
        with open(path, "wb") as handle:
            for chunk in range(size // MIB):
                handle.write(content(1000 + chunk, MIB))
        set_times_exact(path, **times)
        set_times_exact(dest, **times)
        return
    entries: list[dict[str, Any]] = [{"path": ".", "kind": "dir", "mode": 0o755, **times}]
    entries += [{"path": f"d{g:03d}", "kind": "dir", "mode": 0o755, **times} for g in range(dirs)]
    pattern = "d{group:03d}/f{i:05d}.bin" if dirs else "f{i:05d}.bin"
    generate = {"count": files, "per_dir": max(1, files // max(dirs, 1)), "pattern": pattern, "mode": 0o644,
                "size": size, "seed": 1000, "step_ns": 1_000_003, **times}
    materialize(parse_tree(f"bench-{name}", {"entry": entries, "generate": [generate]}), dest)


def _run_child(task: dict[str, Any], strace_out: str | None) -> dict[str, Any]:
    cmd = [*cpu_set(task["cores"]), sys.executable, os.path.abspath(__file__), "--worker", json.dumps(task)]
    if strace_out is not None:
        cmd = ["strace", "-f", "-c", "-U", "calls,name", "-o", strace_out, *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{task['op']} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _strace_counts(path: str) -> dict[str, int]:
    counts = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1] != "total":
                counts[fields[1]] = int(fields[0])
    return counts


def _clean(*paths: str) -> None:
    for path in paths:
        if os.path.lexists(path):
            shutil.rmtree(path)


def _summary(samples: list[int], cpu: list[int], files: int, size: int, *, cores: int, rss: list[int | None],
             base: list[int]) -> dict[str, Any]:
    median_s = statistics.median(samples) / 1e9
    cpu_s = statistics.median(cpu) / 1e9
    peaks = [r for r in rss if r is not None]
    return {"samples_ms": [round(s / 1e6, 3) for s in samples], "median_ms": round(median_s * 1e3, 3),
            "cpu_ms": round(cpu_s * 1e3, 3), "files_per_s_per_core": round(files / median_s / cores, 1),
            "files_per_cpu_s": round(files / cpu_s, 1) if cpu_s else None,
            "min_ms": round(min(samples) / 1e6, 3), "max_ms": round(max(samples) / 1e6, 3),
            "files_per_s": round(files / median_s, 1), "mib_per_s": round(files * size / MIB / median_s, 1),
            "peak_rss_mib": round(max(peaks) / 1024, 1) if peaks else None,
            "worker_baseline_rss_mib": round(min(base) / 1024, 1)}


def bench_corpus(base: str, name: str, shape: tuple[int, int, int], repeats: int, *, profile: bool,
                 conditions: dict[str, Any]) -> dict[str, Any]:
    from artifactkit.store.store import Store  # noqa: PLC0415

    files, size, dirs = shape
    src, again = os.path.join(base, f"corpus-{name}"), os.path.join(base, f"store-again-{name}")
    dest, fresh = os.path.join(base, "out"), os.path.join(base, "store-fresh")
    cores, as_given = conditions["cores"], conditions["source_atime"] == "as-given"
    build_corpus(src, name, files, size, dirs)
    # The stat cache trusts no entry changed within its racy window (2 s) before the publish that
    # wrote it: let the just-built corpus age past it, so the cached re-publish measures hits.
    time.sleep(2.1)
    Store(again).publish(src, "bench", stat_cache=True)  # publish again and download read this one
    stores = {"ak_publish": fresh, "ak_roundtrip": fresh, "ak_republish": again, "ak_download": again,
              "ak_republish_cached": again}
    ops = (*AK_OPS, *PEERS)

    def measure(op: str, strace_out: str | None = None, **extra: Any) -> dict[str, Any]:
        _clean(dest, fresh)
        if as_given:
            reset_source_atimes(src)
        os.sync()
        task = {"op": op, "src": src, "dest": dest, "store": stores.get(op, fresh), "cores": cores, **extra}
        return _run_child(task, strace_out)

    # Warm-up, untimed: page cache, relatime's one atime update per source file, and the peers' RSS. The
    # peers first: their reads move the source's atimes once, and the cached re-publish's warm-up must record
    # the settled ones (else its first timed round records them again instead of re-publishing unchanged).
    warm = {op: measure(op, measure_rss=shutil.which("time") is not None) for op in (*PEERS, *AK_OPS)}
    raw: dict[str, list[dict[str, Any]]] = {op: [] for op in ops}
    loads = []
    for round_no in range(repeats):
        loads.append(os.getloadavg()[0])  # a busy shared machine shows here, and in wall/CPU ratios
        for op in ops if round_no % 2 == 0 else tuple(reversed(ops)):
            raw[op].append(measure(op))
    result: dict[str, Any] = {"files": files, "bytes_per_file": size, "dirs": dirs, "cores": cores, "ops": {},
                              "ratios": {}, "loadavg_1m_per_round": loads}
    for op in ops:
        result["ops"][op] = _summary([r["ns"] for r in raw[op]], [r["cpu_ns"] for r in raw[op]], files, size,
                                     cores=cores, rss=[r["peak_rss_kib"] for r in [warm[op], *raw[op]]],
                                     base=[r["base_rss_kib"] for r in raw[op]])
    for op in AK_OPS:
        result["ratios"][op] = {peer: {
            "paired_median": round(statistics.median(a["ns"] / b["ns"] for a, b in zip(raw[op], raw[peer],
                                                                                        strict=True)), 3),
            "of_medians": round(result["ops"][op]["median_ms"] / result["ops"][peer]["median_ms"], 3),
        } for peer in PEERS}
    result["syscalls"] = _syscalls(base, files, measure)
    if profile:
        result["profile"] = {op: measure(op, profile=True)["profile"] for op in ("ak_publish", "ak_download")}
    _clean(dest, fresh, src, again)
    return result


def _syscalls(base: str, files: int, measure: Any) -> dict[str, Any]:
    """strace -f -c of one publish (new content) and one download, net of an idle child's start-up."""
    if shutil.which("strace") is None:
        return {"skipped": "strace not installed"}
    counts = {}
    for op in ("noop", "ak_publish", "ak_download"):
        out = os.path.join(base, f"strace-{op}.txt")
        measure(op, strace_out=out)
        counts[op] = _strace_counts(out)
    found: dict[str, Any] = {}
    for op in ("ak_publish", "ak_download"):
        net = {k: counts[op].get(k, 0) - counts["noop"].get(k, 0) for k in set(counts[op]) - NOISE}
        net = {k: v for k, v in sorted(net.items(), key=lambda kv: -kv[1]) if v}
        found[op] = {"net_total": sum(net.values()), "per_file": round(sum(net.values()) / files, 2),
                     "flushes": {k: counts[op].get(k, 0) for k in FLUSHES}, "by_name": net}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small corpora, 2 rounds, no profile")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (pairs) per corpus (default 7)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="evidence JSON (default: %(default)s)")
    parser.add_argument("--table-from", metavar="FILE", help="print the Markdown tables of an existing JSON")
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these (repeatable)")
    parser.add_argument("--no-tmpfs", action="store_true", help="only the default temp filesystem")
    parser.add_argument("--no-default-tmp", action="store_true", help="only the tmpfs mounted here")
    parser.add_argument("--cores", type=int, action="append",
                        help="run every child under taskset -c 0..N-1 (repeatable; default: 1 and every core)")
    parser.add_argument("--source-atime", choices=("settled", "as-given"), default="settled",
                        help="settled (default): the source's atimes as the untimed warm-up read left them, "
                             "cp -a's cheapest case; as-given: the corpus's historical times put back before "
                             "every measurement, so relatime moves them on each tool's first read")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile runs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.table_from:
        return rerender(args.table_from, render_tables, "performance.md", "bench-store")
    shapes = QUICK_CORPORA if args.quick else CORPORA
    repeats = args.repeats or (2 if args.quick else 7)
    started = time.monotonic()
    load_before = os.getloadavg()  # other work on a shared 2-core machine shows up as noise
    core_counts = sorted(set(args.cores or [1, os.cpu_count() or 1]))
    with locations(not args.no_tmpfs, not args.no_default_tmp) as dirs:
        results: dict[str, dict[str, Any]] = {}
        for label, path, _note in dirs:
            if path is None:
                continue
            base = tempfile.mkdtemp(prefix="ak-bench-", dir=path)
            try:
                for cores in core_counts:
                    where = f"{label}@{cores}c"  # a location under one CPU set
                    results[where] = {}
                    for name in args.corpus or list(shapes):
                        print(f"[{time.monotonic() - started:6.0f}s] {where}/{name}", file=sys.stderr)
                        profile = (not (args.quick or args.no_profile) and label == "tmpfs" and name != "small"
                                   and cores == core_counts[-1])
                        conditions = {"cores": cores, "source_atime": args.source_atime}
                        results[where][name] = bench_corpus(base, name, shapes[name], repeats, profile=profile,
                                                               conditions=conditions)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        doc = {"schema": SCHEMA, "command": command_line(sys.argv[1:] if argv is None else argv),
               "quick": args.quick, "repeats": repeats, "environment": environment(dirs),
               "conditions": {"cores": core_counts, "source_atime": args.source_atime},
               "method": __doc__.split("\n\n", 2)[2].strip(), "duration_s": round(time.monotonic() - started, 1),
               "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
               "results": results, "targets": targets(results)}
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(render_tables(doc))
    write_table("performance.md", "bench-store", render_tables(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

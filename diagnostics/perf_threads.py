"""Where the CPU a second thread adds to a round trip of ``many`` goes: ``perf`` samples at 1 and 2 threads.

    python3 diagnostics/perf_threads.py [--rounds 15] [--output FILE.json] [--no-docs]   (root: perf, a tmpfs)
    python3 diagnostics/perf_threads.py --table-from diagnostics/results/perf-threads-issue28.json

A 2-thread round trip of ``many`` spends more CPU than a 1-thread one (``bench_store.py``'s engines table: about
a third more), and on two cores that bounds its speed-up: a 2-thread run takes at least half its CPU time, so it
is at most 2 x wall(1 thread) / CPU(2 threads) faster, however well its threads overlap. This says where the
extra CPU is spent. Child processes, alternating between the thread counts, publish ``many`` into a fresh store
and download it into a fresh directory (``--rounds`` times per thread count in all) on a tmpfs, on the native
engine, under ``taskset`` of as many CPUs as threads and ``perf record -F 4000 -g``. Each sample is attributed
to its leaf symbol and to the system call it was taken in (the outermost ``__x64_sys_*`` or ``__do_sys_*``
frame of its stack, else the function ``do_syscall_64`` called; else a page fault or user space). Reported: the
wall and CPU time (``getrusage``) of each thread count, its samples (one is 0.25 ms of CPU) by system call, and
the (system call, symbol) pairs whose count grew most.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Final

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_corpus import CORPORA, build_corpus  # this directory's benchmark helpers
from bench_env import child_env, command_line, cpu_set, environment, tmpfs_base
from docs_tables import rerender, write_table

SCHEMA: Final = "artifactkit.perf-threads/1"
HZ: Final = 4000
#: (system call, symbol) pairs kept in the evidence, most grown first; the docs show the first SHOWN_SYMBOLS of
#: them, and the SHOWN_CALLS system calls grown most (enough to reach the ones that barely grew).
SHOWN: Final = 25
SHOWN_SYMBOLS: Final = 15
SHOWN_CALLS: Final = 12
#: Rounds per child process: the thread counts' children alternate (1, 2, then 2, 1, ...), so a drift in the
#: machine's speed falls on both, as it would not with each thread count's rounds in one block.
ROUNDS_PER_CHILD: Final = 3
PAGE: Final = "performance.md"
BLOCK: Final = "perf-threads"
#: The child: ``rounds`` publishes and downloads, each into a fresh store and destination, and a JSON line on
#: stdout: each round's wall times and CPU time (``getrusage``: every thread of the process). perf samples only
#: between its "enable" and "disable" (``perf record -D -1 --control``), each answered "ack" once perf has done
#: it: the imports and the removal of each round's store and destination are neither sampled nor timed.
CHILD: Final = """
import json, resource, shutil, sys, time
from artifactkit import Store
src, base, control, ack = sys.argv[1], sys.argv[2], sys.argv[5], sys.argv[6]
threads, rounds = int(sys.argv[3]), int(sys.argv[4])

def tell(ctl, answer, word):
    ctl.write(word + "\\n")
    ctl.flush()
    # perf writes "ack\\n" and the string's NUL after it; an empty read: perf is gone, nothing would be sampled.
    if answer.readline().strip("\\0\\n") != "ack":
        raise SystemExit(f"perf did not acknowledge {word!r}")

def cpu_s():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime

done = []
with open(control, "w") as ctl, open(ack) as answer:
    for _ in range(rounds):
        shutil.rmtree(base + "/store", ignore_errors=True)
        shutil.rmtree(base + "/out", ignore_errors=True)
        tell(ctl, answer, "enable")
        cpu, start = cpu_s(), time.perf_counter_ns()
        Store(base + "/store").publish(src, "bench", workers=threads)
        middle = time.perf_counter_ns()
        Store(base + "/store").download("bench", base + "/out", workers=threads)
        end, cpu = time.perf_counter_ns(), cpu_s() - cpu
        tell(ctl, answer, "disable")
        done.append({"publish_ns": middle - start, "download_ns": end - middle, "cpu_ns": round(cpu * 1e9)})
print(json.dumps(done))
"""
_SYSCALL: Final = re.compile(r"__(?:x64|do|se)_sys_(?:new)?(\w+)")


def _attribute(script_text: str) -> collections.Counter[tuple[str, str]]:
    """(system call, else where the sample was taken; leaf symbol) -> samples, from ``perf script``'s stacks
    (leaf first; samples apart by blank lines)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for block in script_text.split("\n\n"):
        frames = [parts[1].split(" (")[0] for line in block.splitlines() if len(parts := line.split(None, 1)) == 2]
        if frames:
            counts[(_call_of(frames), frames[0])] += 1
    return counts


def _call_of(frames: list[str]) -> str:
    """The system call a sample was taken in: its outermost ``__x64_sys_*`` (or ``__do_sys_*``) frame, else the
    frame ``do_syscall_64`` called (past the ``x64_sys_call`` dispatcher); else a page fault or user space."""
    calls = [found[1] for frame in frames if (found := _SYSCALL.search(frame))]
    if calls:
        return calls[-1]
    if "do_syscall_64" in frames:
        # Where the kernel inlined or tail-called the wrapper away (on this 6.18 kernel: path_listxattrat for
        # llistxattr, ksys_lseek, ksys_read, ksys_write), the call's own function is the one do_syscall_64 called.
        below = [frame for frame in frames[:frames.index("do_syscall_64")] if frame != "x64_sys_call"]
        called = below[-1] if below else ""
        if called.startswith("ksys_"):
            return called.removeprefix("ksys_")
        if called.startswith("path_") and called.endswith("at"):
            return called.removeprefix("path_").removesuffix("at")
        return "(system call entry and exit)"
    if any("exc_page_fault" in frame for frame in frames):
        return "(page fault)"
    return "(user space)"


def _profile(src: str, base: str, threads: int, rounds: int, data: str) -> dict[str, Any]:
    control, ack = data + ".ctl", data + ".ack"
    os.mkfifo(control)
    os.mkfifo(ack)
    out = subprocess.run(["perf", "record", "-q", "-F", str(HZ), "-g", "-D", "-1", "--control",
                          f"fifo:{control},{ack}", "-o", data, "--", *cpu_set(threads), sys.executable, "-c", CHILD,
                          src, base, str(threads), str(rounds), control, ack],
                         env=child_env("native"), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"perf record of {threads} thread(s) failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    text = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True,
                          check=True).stdout
    return {"rounds": json.loads(out.stdout), "samples": _attribute(text)}


def _summary(children: list[dict[str, Any]]) -> dict[str, Any]:
    """One thread count's children together: medians of its rounds' wall times, mean CPU, every sample."""
    done = [r for child in children for r in child["rounds"]]
    samples: collections.Counter[tuple[str, str]] = collections.Counter()
    for child in children:
        samples.update(child["samples"])
    return {"median_publish_ms": statistics.median(r["publish_ns"] for r in done) / 1e6,
            "median_download_ms": statistics.median(r["download_ns"] for r in done) / 1e6,
            "median_round_trip_ms": statistics.median(r["publish_ns"] + r["download_ns"] for r in done) / 1e6,
            "mean_cpu_ms": statistics.fmean(r["cpu_ns"] for r in done) / 1e6, "rounds": done, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output")
    parser.add_argument("--no-docs", action="store_true", help="do not write the table into docs/performance.md")
    parser.add_argument("--table-from", metavar="FILE", help="print a kept run's table, write it into the docs")
    args = parser.parse_args()
    if args.table_from:
        raise SystemExit(rerender(args.table_from, table, PAGE, BLOCK))
    if shutil.which("perf") is None or os.geteuid() != 0:
        raise SystemExit("needs root and perf (Debian: linux-perf)")
    with tmpfs_base() as (base, note), tempfile.TemporaryDirectory(prefix="ak-perf-") as data_dir:
        src = os.path.join(base, "src")
        build_corpus(src, "many", *CORPORA["many"])
        env = environment(base, note)
        children: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for k in range(-(-args.rounds // ROUNDS_PER_CHILD)):
            rounds = min(ROUNDS_PER_CHILD, args.rounds - k * ROUNDS_PER_CHILD)
            for threads in (1, 2) if k % 2 == 0 else (2, 1):
                data = os.path.join(data_dir, f"{threads}-{k}.data")
                children[threads].append(_profile(src, base, threads, rounds, data))
        runs = {threads: _summary(done) for threads, done in children.items()}
    one, two = runs[1]["samples"], runs[2]["samples"]
    grown = sorted(((two[key] - one[key], key) for key in set(one) | set(two)), reverse=True)
    report = {
        "schema": SCHEMA, "command": command_line(sys.argv[1:], "perf_threads.py"), "rounds": args.rounds,
        "hz": HZ, "environment": env,
        "threads": {str(t): {**{k: v for k, v in r.items() if k != "samples"}, "samples": sum(r["samples"].values())}
                    for t, r in runs.items()},
        "grown_most": [{"syscall": call, "symbol": sym, "samples_1t": one[(call, sym)], "samples_2t": two[(call, sym)],
                        "grown": delta} for delta, (call, sym) in grown[:SHOWN]],
        "by_syscall": _by_syscall(one, two),
    }
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(table(report))
    if not args.no_docs:
        write_table(PAGE, BLOCK, table(report))


def _by_syscall(one: collections.Counter[tuple[str, str]],
                two: collections.Counter[tuple[str, str]]) -> list[dict[str, Any]]:
    """Samples per system call (every symbol under it) at each thread count, most grown first."""
    sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for at, counts in enumerate((one, two)):
        for (call, _), samples in counts.items():
            sums[call][at] += samples
    rows = sorted(sums.items(), key=lambda item: item[1][0] - item[1][1])
    return [{"syscall": call, "samples_1t": a, "samples_2t": b, "grown": b - a} for call, (a, b) in rows]


def table(report: dict[str, Any]) -> str:
    """The docs' table of a run (``docs/performance.md``, block ``perf-threads``)."""
    per_sample_ms = 1000 / report["hz"] / report["rounds"]  # one sample's CPU, as a mean per round trip
    t1, t2 = report["threads"]["1"], report["threads"]["2"]
    lines = [f"Command: `{report['command']}`; {report['rounds']} round trips at each thread count, "
             f"{report['hz']} samples/s.", "",
             "| per round trip | 1 thread | 2 threads |", "|---|---|---|",
             f"| median wall ms: publish + download | {t1['median_publish_ms']:.1f} + {t1['median_download_ms']:.1f} "
             f"| {t2['median_publish_ms']:.1f} + {t2['median_download_ms']:.1f} |",
             f"| median wall ms: round trip | {t1['median_round_trip_ms']:.1f} | {t2['median_round_trip_ms']:.1f} |",
             f"| mean CPU ms (`getrusage`) | {t1['mean_cpu_ms']:.1f} | {t2['mean_cpu_ms']:.1f} |",
             f"| mean CPU ms sampled | {t1['samples'] * per_sample_ms:.1f} | {t2['samples'] * per_sample_ms:.1f} |",
             "", "| system call | CPU at 1 thread ms | at 2 threads ms | grown ms |", "|---|---|---|---|"]
    lines += [f"| {row['syscall']} | {row['samples_1t'] * per_sample_ms:.2f} | {row['samples_2t'] * per_sample_ms:.2f} "
              f"| {row['grown'] * per_sample_ms:+.2f} |" for row in report["by_syscall"][:SHOWN_CALLS]]
    lines += ["", "| system call | symbol | 1 thread ms | 2 threads ms | grown ms |", "|---|---|---|---|---|"]
    lines += [f"| {row['syscall']} | `{row['symbol']}` | {row['samples_1t'] * per_sample_ms:.2f} "
              f"| {row['samples_2t'] * per_sample_ms:.2f} | {row['grown'] * per_sample_ms:+.2f} |"
              for row in report["grown_most"][:SHOWN_SYMBOLS]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

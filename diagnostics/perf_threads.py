"""Where the CPU a second thread adds to a round trip of ``many`` goes: ``perf`` samples at 1 and 2 threads.

    python3 diagnostics/perf_threads.py [--rounds 15] [--output FILE.json] [--no-docs]   (root: perf, a tmpfs)
    python3 diagnostics/perf_threads.py --table-from diagnostics/results/perf-threads-issue28.json

A 2-thread round trip of ``many`` spends more CPU than a 1-thread one (``bench_store.py``'s engines table: about
a third more), and on two cores that bounds its speed-up: 2 x CPU(1 thread) / CPU(2 threads), whatever overlaps.
This says where the extra CPU is spent. One child process per thread count publishes ``many`` into a fresh store
and downloads it into a fresh directory ``--rounds`` times on a tmpfs, on the native engine, under ``taskset`` of
as many CPUs as threads and ``perf record -F 4000 -g``. Each sample is attributed to its leaf symbol and to the
system call it was taken in (the outermost ``__x64_sys_*`` or ``__do_sys_*`` frame of its stack; else a page fault,
the system call's entry and exit, or user space). Reported: the
samples at each thread count, and the (system call, symbol) pairs whose count grew most, a sample being 0.25 ms
of CPU. The rounds of both are in one run, one after the other, so an hour's drift is shared.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
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
SHOWN: Final = 25
PAGE: Final = "performance.md"
BLOCK: Final = "perf-threads"
#: The child: ``rounds`` publishes and downloads, each into a fresh store and destination; its medians to stderr.
#: perf samples only between its "enable" and "disable" (``perf record -D -1 --control``): the imports and the
#: removal of each round's store and destination are not sampled.
CHILD: Final = """
import shutil, sys, time
from artifactkit import Store
src, base, threads, rounds, control, ack = sys.argv[1:3] + [int(sys.argv[3]), int(sys.argv[4])] + sys.argv[5:7]
def tell(ctl, answer, word):
    ctl.write(word + "\\n")
    ctl.flush()
    answer.readline()
times = []
with open(control, "w") as ctl, open(ack) as answer:
    for _ in range(rounds):
        shutil.rmtree(base + "/store", ignore_errors=True)
        shutil.rmtree(base + "/out", ignore_errors=True)
        tell(ctl, answer, "enable")
        start = time.perf_counter_ns()
        Store(base + "/store").publish(src, "bench", workers=threads)
        middle = time.perf_counter_ns()
        Store(base + "/store").download("bench", base + "/out", workers=threads)
        end = time.perf_counter_ns()
        tell(ctl, answer, "disable")
        times.append((middle - start, end - middle))
print(sorted(p for p, _ in times)[len(times) // 2], sorted(d for _, d in times)[len(times) // 2])
"""
_SYSCALL: Final = re.compile(r"__(?:x64|do)_sys_(?:new)?(\w+)")


def _attribute(script_text: str) -> collections.Counter[tuple[str, str]]:
    """(system call or "user", leaf symbol) -> samples, from ``perf script``'s stacks (leaf first)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for block in script_text.split("\n\n"):
        frames = [parts[1] for line in block.splitlines() if len(parts := line.split(None, 1)) == 2]
        if not frames:
            continue
        leaf = frames[0].split(" (")[0]
        calls = [found[1] for frame in frames if (found := _SYSCALL.search(frame))]
        counts[(calls[-1] if calls else _outside_calls(frames), leaf)] += 1
    return counts


def _outside_calls(frames: list[str]) -> str:
    """Where a sample with no system call's frame was taken."""
    if any("exc_page_fault" in frame for frame in frames):
        return "(page fault)"
    if any("do_syscall_64" in frame or "entry_SYSCALL" in frame for frame in frames):
        return "(system call entry and exit)"
    return "(user space)"


def _profile(src: str, base: str, threads: int, rounds: int, data: str) -> dict[str, Any]:
    control, ack = data + ".ctl", data + ".ack"
    os.mkfifo(control)
    os.mkfifo(ack)
    out = subprocess.run(["perf", "record", "-q", "-F", str(HZ), "-g", "-D", "-1", "--control",
                          f"fifo:{control},{ack}", "-o", data, "--", *cpu_set(threads), sys.executable, "-c", CHILD,
                          src, base, str(threads), str(rounds), control, ack],
                         env=child_env("native"), capture_output=True, text=True, check=True)
    publish_ns, download_ns = map(int, out.stdout.split())
    text = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True,
                          check=True).stdout
    return {"median_publish_ms": publish_ns / 1e6, "median_download_ms": download_ns / 1e6,
            "samples": _attribute(text)}


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
    runs: dict[int, dict[str, Any]] = {}
    with tmpfs_base() as (base, note), tempfile.TemporaryDirectory(prefix="ak-perf-") as data_dir:
        src = os.path.join(base, "src")
        build_corpus(src, "many", *CORPORA["many"])
        env = environment(base, note)
        for threads in (1, 2):
            runs[threads] = _profile(src, base, threads, args.rounds, os.path.join(data_dir, f"{threads}.data"))
    one, two = runs[1]["samples"], runs[2]["samples"]
    grown = sorted(((two[key] - one[key], key) for key in set(one) | set(two)), reverse=True)
    report = {
        "schema": SCHEMA, "command": command_line(sys.argv[1:], "perf_threads.py"), "rounds": args.rounds,
        "hz": HZ, "environment": env,
        "threads": {str(t): {"median_publish_ms": r["median_publish_ms"], "median_download_ms": r["median_download_ms"],
                             "samples": sum(r["samples"].values())} for t, r in runs.items()},
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
    ms = 1000 / report["hz"] / report["rounds"]  # one sample's CPU per round trip
    t1, t2 = report["threads"]["1"], report["threads"]["2"]
    lines = [f"Command: `{report['command']}`; {report['rounds']} round trips each, {report['hz']} Hz.", "",
             f"CPU sampled per round trip: 1 thread {t1['samples'] * ms:.1f} ms, 2 threads {t2['samples'] * ms:.1f} ms "
             f"(medians: publish {t1['median_publish_ms']:.1f} -> {t2['median_publish_ms']:.1f} ms, download "
             f"{t1['median_download_ms']:.1f} -> {t2['median_download_ms']:.1f} ms)", "",
             "| system call | CPU at 1 thread ms | at 2 threads ms | grown ms |", "|---|---|---|---|"]
    lines += [f"| {row['syscall']} | {row['samples_1t'] * ms:.2f} | {row['samples_2t'] * ms:.2f} "
              f"| {row['grown'] * ms:+.2f} |" for row in report["by_syscall"][:12]]
    lines += ["", "| system call | symbol | 1 thread ms | 2 threads ms | grown ms |", "|---|---|---|---|---|"]
    lines += [f"| {row['syscall']} | `{row['symbol']}` | {row['samples_1t'] * ms:.2f} | {row['samples_2t'] * ms:.2f} "
              f"| {row['grown'] * ms:+.2f} |" for row in report["grown_most"][:15]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

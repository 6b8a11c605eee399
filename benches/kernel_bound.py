"""What the kernel gives a second thread here: a native publish's and a download's system calls for ``many``, and
nothing else, on one thread, two threads of one process, and two processes (issue 28's "2 threads over 1").

    python -m benches.kernel_bound [--rounds 9] [--workers 2] [--output FILE.json]   (from the repository root)

``kernel_bound.c`` (compiled here with ``gcc -O2``) makes, per file, the calls ``strace -f -c`` counts for the
native engine (docs/performance.md, "Syscalls per file"): a publish lists each directory with ``O_NOATIME`` and
``lstat``s and ``llistxattr``s each entry (the scan), opens, ``fstat``s, ``FS_IOC_GETFLAGS``, ``SEEK_HOLE``s,
reads, ``fstat``s again and stages each file (the read), one ``syncfs``, then renames every staged file into the
one ``blobs/`` (the moves); a download creates each directory's files from ``blobs/`` with their owner, mode,
flags read and times, and ``lstat``s them back. No sha256, no comparison of what comes back, no Python, no
manifest: so a figure here is a bound on what the native core's threads can gain, not a peer of the core. A
third mix, ``split``, is the publish's calls with ``blobs/`` split into 256 directories by a blob's first byte,
each blob staged in the directory it is renamed in: a layout this store does not have, measured for what it
would give the moves (a rename within one directory takes that directory's lock, not the filesystem's).

Threads claim items one at a time from a shared counter, as ``native/src/sys/pool.rs`` does; processes take a fixed
share each and share nothing but the kernel (no file-descriptor table, no address space). One thread runs under
``taskset -c 0``, the others under as many CPUs as workers — the benchmark's own ``native-1t``/``native-2t``
conditions. ``many`` (10,000 x 1 KiB in 100 directories) on a tmpfs; each round runs every configuration in
alternating order, every publish into a fresh directory, every download into a fresh destination; ``sync``
before each run. Reported: medians, and each configuration's median of per-round speed-ups over one thread.
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
from typing import Any, Final

from benches.env import CORPORA, build_corpus, command_line, cpu_set, environment, tmpfs_base
from diagnostics.docs_tables import rerender, write_table

SOURCE: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_bound.c")
PAGE, BLOCK = "performance.md", "bench-kernel-bound"
MIXES: Final = ("publish", "split", "download")
_PUBLISH: Final = ("scan_ms", "read_ms", "moves_ms", "total_ms")
PHASES: Final = {"publish": _PUBLISH, "split": _PUBLISH, "download": ("total_ms",)}


def configurations(workers: int) -> list[tuple[str, int, str]]:
    """(name, workers, threads|processes): one thread, and ``workers`` threads or processes."""
    return [("1 thread", 1, "threads"), (f"{workers} threads", workers, "threads"),
            (f"{workers} processes", workers, "processes")]


def compile_bound(into: str) -> tuple[str, str]:
    """The program, and the compiler's first line."""
    binary = os.path.join(into, "kernel_bound")
    subprocess.run(["gcc", "-O2", "-Wall", "-pthread", "-o", binary, SOURCE], check=True)
    version = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout
    return binary, version.splitlines()[0]


def run(binary: str, mix: str, *, src: str, work: str, workers: int, how: str) -> dict[str, float]:
    os.sync()  # no run pays to write back another's dirty pages
    done = subprocess.run([*cpu_set(workers), binary, mix, src, work, str(workers), how],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kernel_bound {mix} {workers} {how} failed ({done.returncode}): {done.stderr[-2000:]}")
    found: dict[str, float] = json.loads(done.stdout)
    return found


def measure(binary: str, src: str, base: str, workers: int, rounds: int) -> dict[str, Any]:
    configs = configurations(workers)
    seeded = os.path.join(base, "seeded")  # the blobs every download reads: one publish, untimed
    os.mkdir(seeded)
    run(binary, "publish", src=src, work=seeded, workers=1, how="threads")
    samples: dict[str, dict[str, list[dict[str, float]]]] = {m: {name: [] for name, *_ in configs} for m in MIXES}
    for round_no in range(rounds):
        for name, count, how in configs if round_no % 2 == 0 else configs[::-1]:
            for mix in ("publish", "split"):
                work = tempfile.mkdtemp(dir=base)
                samples[mix][name].append(run(binary, mix, src=src, work=work, workers=count, how=how))
                shutil.rmtree(work)
            shutil.rmtree(os.path.join(seeded, "dest"), ignore_errors=True)
            samples["download"][name].append(run(binary, "download", src=src, work=seeded, workers=count, how=how))
    results: dict[str, Any] = {}
    for mix in MIXES:
        one = samples[mix][configs[0][0]]
        results[mix] = {name: {
            **{phase: round(statistics.median(s[phase] for s in runs), 2) for phase in PHASES[mix]},
            "speedup_paired": {phase: round(statistics.median(
                a[phase] / b[phase] for a, b in zip(one, runs, strict=True)), 3) for phase in PHASES[mix]},
            "samples_total_ms": [round(s["total_ms"], 2) for s in runs]} for name, runs in samples[mix].items()}
    return results


def table(doc: dict[str, Any]) -> str:
    """The docs' block ``bench-kernel-bound``: each mix and phase, every configuration's ms and speed-up."""
    env = doc["environment"]
    names = list(doc["results"]["publish"])
    shown = {"scan_ms": "scan", "read_ms": "read and stage", "moves_ms": "moves into `blobs/`", "total_ms": "whole"}
    lines = [f"{env['cpu']['model']}, {env['nproc']} CPUs, Linux {env['kernel']}; {doc['compiler']}; "
             f"{doc['rounds']} rounds; `{doc['command']}`", "",
             "| `many`, the calls alone | " + " | ".join(f"{n} ms" for n in names) + " | "
             + " | ".join(f"{n} over 1 thread" for n in names[1:]) + " |", "|" + "---|" * (1 + 2 * len(names) - 1)]
    mixes = {"publish": "publish", "split": "publish, `blobs/` split by directory (no such layout)",
             "download": "download (create, restore, read back)"}
    for mix in (m for m in MIXES if m in doc["results"]):
        for phase in PHASES[mix]:
            rows = doc["results"][mix]
            label = f"{mixes[mix]}: {shown[phase]}" if mix != "download" else mixes[mix]
            lines.append(f"| {label} | " + " | ".join(f"{rows[n][phase]:.1f}" for n in names) + " | "
                         + " | ".join(f"{rows[n]['speedup_paired'][phase]:.2f}x" for n in names[1:]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", help="the evidence JSON to write (and the docs' block with it)")
    parser.add_argument("--table-from", help="print the table of a kept evidence file and write it into the docs")
    args = parser.parse_args(argv)
    if args.table_from:
        return rerender(args.table_from, table, PAGE, BLOCK)
    if shutil.which("gcc") is None:
        raise SystemExit("needs gcc (Debian's gcc) to build kernel_bound.c")
    name, files, size, dirs = "many", *CORPORA["many"]
    with tempfile.TemporaryDirectory() as build, tmpfs_base("2g") as (tmpfs, note):
        binary, compiler = compile_bound(build)
        src = os.path.join(tmpfs, "corpus")
        build_corpus(src, name, files, size, dirs)
        base = os.path.join(tmpfs, "runs")
        os.mkdir(base)
        results = measure(binary, src, base, args.workers, args.rounds)
        env = environment(tmpfs, note)
    doc = {"schema": "artifactkit-bench-kernel-bound/1",
           "command": command_line(sys.argv[1:] if argv is None else argv, "kernel_bound"),
           "corpus": {"name": name, "files": files, "bytes_per_file": size, "dirs": dirs}, "rounds": args.rounds,
           "compiler": compiler, "environment": env, "results": results}
    print(table(doc))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1)
            handle.write("\n")
        write_table(PAGE, BLOCK, table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

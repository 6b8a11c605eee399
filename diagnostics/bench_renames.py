"""Whether a publish's moves into ``blobs/`` can use a second core: the kernel's side of the 2-thread speed-up.

    python3 diagnostics/bench_renames.py [--files 10000] [--rounds 9] [--output FILE.json]

A publish stages each new blob in its transaction directory and, after the one ``syncfs``, renames every one
into the flat ``blobs/`` (``native/src/read/renames.rs``, on one thread): on ``many`` those 10,000 renames are the
serial tail of a 2-thread publish. This measures, on a tmpfs, what the same moves cost done other ways, one or
two processes each taking half of them (processes, so no GIL is shared: the kernel's locks are what differ):

- ``rename``: ``renameat`` from staging to blobs, today's move, each call from Python (``os.rename``) and, where
  the core is built, by the core's ``rename_files`` (what a publish runs: no Python between the calls, so its
  figures are the kernel's alone);
- ``link+unlink``: ``linkat`` into blobs then ``unlinkat`` of the staged name (no rename lock: ``link`` locks
  the target directory, ``unlink`` the staging one);
- ``flat``: every process renames into one ``blobs/``; ``sharded``: each process into a directory of its
  own (a layout this store does not have: what splitting ``blobs/`` would give);
- each process stages in a directory of its own where there are two; ``in place``: each stages in its
  blobs directory itself and renames there (a rename within one directory takes that directory's lock
  alone, not the filesystem's rename mutex: what staging inside a split ``blobs/`` would give).

Each round sets up every variant afresh (10,000 files of 1 KiB, untimed) and runs them in alternating order;
a variant's time is from the moment its processes are released together to the last one done. Reported: the
medians, and each variant's median of per-round ratios to one process renaming (higher is faster).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import time
from multiprocessing.synchronize import Barrier
from typing import Any, Final

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import command_line, environment, tmpfs_base  # this directory's benchmark helpers

#: (name, processes, operation, target layout)
VARIANTS: Final[tuple[tuple[str, int, str, str], ...]] = (
    ("rename, 1 process", 1, "rename", "flat"),
    ("rename by the core, 1 process", 1, "core", "flat"),
    ("rename by the core, 2 processes, one blobs/", 2, "core", "flat"),
    ("rename, 2 processes, one blobs/", 2, "rename", "flat"),
    ("rename, 2 processes, a blobs dir each", 2, "rename", "sharded"),
    ("link+unlink, 1 process", 1, "link", "flat"),
    ("link+unlink, 2 processes, one blobs/", 2, "link", "flat"),
    ("link+unlink, 2 processes, a blobs dir each", 2, "link", "sharded"),
    ("rename in place, 1 process", 1, "rename", "in-place"),
    ("rename in place, 2 processes, one blobs/", 2, "rename", "in-place-flat"),
    ("rename in place, 2 processes, a blobs dir each", 2, "rename", "in-place-sharded"),
    ("rename in place by the core, 2 processes, a blobs dir each", 2, "core", "in-place-sharded"),
)
BASELINE: Final = VARIANTS[0][0]


def _prepare(base: str, files: int, processes: int, layout: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Fresh staging and blob directories; per process: (staging dir, target dir, [(staged name, blob name)])."""
    shutil.rmtree(base, ignore_errors=True)
    parts = []
    data = b"x" * 1024
    for p in range(processes):
        target = os.path.join(base, "blobs" if layout in ("flat", "in-place", "in-place-flat") else f"blobs-{p}")
        staging = target if layout.startswith("in-place") else os.path.join(base, f"staging-{p}")
        os.makedirs(staging, exist_ok=True)
        os.makedirs(target, exist_ok=True)
        names = []
        for i in range(p, files, processes):
            name = f"blob-{i}"
            fd = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            os.write(fd, data)
            os.close(fd)
            names.append((name, f"{i * 2654435761 % 2**64:064x}"))  # a digest-shaped name, as blobs/ holds
        parts.append((staging, target, names))
    return parts


def _move(part: tuple[str, str, list[tuple[str, str]]], operation: str, start: Barrier) -> None:
    staging, target, names = part
    src, dst = os.open(staging, os.O_RDONLY | os.O_DIRECTORY), os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    start.wait()
    if operation == "core":  # the publish's own move (native/src/read/renames.rs): no Python between the renames
        from artifactkit import _native  # noqa: PLC0415 - only where the core is built

        _native.rename_files(src, dst, names)
    elif operation == "rename":
        for name, blob in names:
            os.rename(name, blob, src_dir_fd=src, dst_dir_fd=dst)
    else:
        for name, blob in names:
            os.link(name, blob, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
            os.unlink(name, dir_fd=src)


def _run(base: str, files: int, processes: int, operation: str, layout: str) -> float:
    """One variant's wall time in ms, from the release of its processes to the last one's end."""
    parts = _prepare(base, files, processes, layout)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(processes + 1)
    workers = [ctx.Process(target=_move, args=(part, operation, start)) for part in parts]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter_ns()
    for worker in workers:
        worker.join()
    elapsed = (time.perf_counter_ns() - began) / 1e6
    if any(worker.exitcode != 0 for worker in workers):
        raise RuntimeError(f"a mover of {operation}/{layout} failed")
    names = [name for d in os.listdir(base) for name in os.listdir(os.path.join(base, d))]
    left = sum(name.startswith("blob-") for name in names)  # a staged name, wherever it was staged
    moved = len(names) - left
    if (moved, left) != (files, 0):
        raise RuntimeError(f"{operation}/{layout}: {moved} moved and {left} left of {files}")
    return elapsed


def table(evidence: dict[str, Any]) -> str:
    """The docs' table of a run (``docs/performance.md``, block ``bench-renames``): its rows, as measured."""
    shown = {"rename": "`os.rename`", "core": "the core's `rename_files`", "link": "`link` + `unlink`"}
    places = {"flat": "one `blobs/`", "sharded": "a blobs directory each", "in-place": "one `blobs/`",
              "in-place-flat": "one `blobs/`", "in-place-sharded": "a blobs directory each"}
    head = f"| moves ({evidence['files']:,}) | median ms | µs per file | speed-up over one process renaming (paired) |"
    lines = [head, "|---|---|---|---|"]
    for name, processes, operation, layout in VARIANTS:
        row = evidence["results"].get(name)
        if row is None:
            continue  # the core was not built for that run
        what = f"{shown[operation]}, {processes} process" + ("es, " + places[layout] if processes > 1 else "")
        if layout.startswith("in-place"):
            what += ", staged in that directory"
        lines.append(f"| {what} | {row['median_ms']:.1f} | {row['us_per_file']:.2f} | "
                     f"{row['speedup_over_one_rename_paired']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output", help="the evidence JSON to write")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("this measures two processes against one: it needs 2 CPUs")
    try:
        from artifactkit import _native  # noqa: F401, PLC0415 - is the core built?
        variants = VARIANTS
    except ImportError:
        variants = tuple(v for v in VARIANTS if v[2] != "core")
    samples: dict[str, list[float]] = {name: [] for name, *_ in variants}
    with tmpfs_base("1g") as (tmpfs, note):
        base = os.path.join(tmpfs, "moves")
        for round_no in range(args.rounds):
            for name, processes, operation, layout in variants if round_no % 2 == 0 else variants[::-1]:
                samples[name].append(_run(base, args.files, processes, operation, layout))
        env = environment(tmpfs, note)
    results = {name: {"median_ms": round(statistics.median(ms), 1), "samples_ms": [round(x, 1) for x in ms],
                      "us_per_file": round(statistics.median(ms) * 1000 / args.files, 2),
                      "speedup_over_one_rename_paired": round(statistics.median(
                          b / x for b, x in zip(samples[BASELINE], ms, strict=True)), 3)}
               for name, ms in samples.items()}
    evidence: dict[str, Any] = {
        "schema": "artifactkit-bench-renames/1",
        "command": command_line(sys.argv[1:] if argv is None else argv, "bench_renames.py"),
        "files": args.files, "rounds": args.rounds, "environment": env, "results": results,
    }
    print(table(evidence))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(evidence, handle, indent=1)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

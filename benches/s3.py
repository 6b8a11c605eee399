"""Paired benchmark of a bucket store against ``rclone copy`` and ``aws s3 sync`` (issue 15, item 7).

    python -m benches.s3 [--rounds N] [--corpus NAME ...] [--many-files N] [--mixed-files N] [--no-docs]
    (from the repository root)

One run starts a throw-away SeaweedFS (``weed mini`` on loopback free ports, its data dir on tmpfs)
and builds the corpora of ``store.py`` on tmpfs (``/dev/shm``): ``small`` 128 x 16 KiB in 4
dirs, ``many`` 10,000 x 1 KiB in 100 dirs, ``large`` one 256 MiB file, ``mixed`` 5,000 files of mixed sizes in
50 dirs (90 % of 1-16 KiB, 9 % of 32-256 KiB, 1 % of 1-4 MiB; 217 MiB, sizes from a fixed seed: the
shape of a source tree or a model cache, issue 53). Every measured operation is a
fresh process and the clock runs in this parent around the whole process, spawn to exit, for all
three tools alike: artifactkit is a child that imports the library and calls
``Store("s3://bucket/prefix").publish`` / ``.download`` (its clock around the call alone, after the
imports, is kept too, as ``op_ms``); ``rclone copy`` (its default parallelism: 4 transfers, 8
checkers) and ``aws s3 sync`` (its default: 10 concurrent requests) up and down. Each round every
tool gets a fresh bucket prefix; the uploads run in forward tool order in even rounds and reversed
in odd ones (the downloads likewise, after all uploads), so each pair runs A-before-B in half the
rounds. Then artifactkit re-publishes the unchanged tree into its prefix: the child counts the
requests its client sends, by operation, and the bytes of every ``blobs/`` PUT (must be 0).
One untimed warm-up round on ``small`` runs first (binaries, imports, weed's first volumes). Ratios
are artifactkit / peer: the median of the per-round ratios (paired), next to the ratio of medians;
below 1 means artifactkit was faster. Every download is checked untimed (file count and bytes).

The server, its clients and the corpus share this machine's cores: the 1-minute load average is
kept per round, and the CPU time (user + system) of each measured process tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

MIB: Final = 1 << 20
SCHEMA: Final = "artifactkit.bench-s3/1"
DEFAULT_OUTPUT: Final = "diagnostics/results/bench-s3.json"
TMPFS: Final = "/dev/shm"  # noqa: S108 - only a mkdtemp (private, 0700) directory is made in it
CORPORA: Final = {"small": (128, 16 << 10, 4), "many": (10_000, 1 << 10, 100), "large": (1, 256 * MIB, 0),
                   "mixed": (5_000, 0, 50)}
#: ``mixed``: (share of the files, smallest, largest size), sizes drawn from a fixed seed.
MIXED_SIZES: Final = ((0.90, 1 << 10, 16 << 10), (0.09, 32 << 10, 256 << 10), (0.01, 1 * MIB, 4 * MIB))
TOOLS: Final = ("artifactkit", "rclone", "aws")
PEERS: Final = ("rclone", "aws")


# -- the artifactkit child ---------------------------------------------------------------------

def worker(task: dict[str, Any]) -> dict[str, Any]:
    """One library call in a fresh process; the requests its client sent, by operation (``Bucket.requests``),
    and the bytes it put under ``blobs/`` (a thin wrapper around the two methods that send blob bytes)."""
    from artifactkit import Store  # noqa: PLC0415 - the child's own import, inside the parent's clock
    from artifactkit.store.s3.objects import Bucket  # noqa: PLC0415

    blob_put_bytes = [0]
    real_put, real_upload = Bucket.put, Bucket.upload_file

    def counted_put(self: Bucket, key: str, body: Any, **kwargs: Any) -> str:
        if key.startswith("blobs/"):
            blob_put_bytes[0] += len(body) if isinstance(body, bytes) else os.fstat(body.fileno()).st_size
        return real_put(self, key, body, **kwargs)

    def counted_upload(self: Bucket, key: str, path: str) -> None:
        if key.startswith("blobs/"):
            blob_put_bytes[0] += os.path.getsize(path)
        real_upload(self, key, path)

    Bucket.put, Bucket.upload_file = counted_put, counted_upload  # type: ignore[method-assign]
    store = Store(task["url"])
    start = time.perf_counter_ns()
    if task["op"] == "download":
        store.download("bench@1", task["dest"])
    else:
        store.publish(task["src"], "bench")
    calls = store.bucket.requests  # type: ignore[attr-defined]
    return {"op_ns": time.perf_counter_ns() - start, "calls": dict(sorted(calls.items())),
            "blob_put_bytes": blob_put_bytes[0]}


# -- the parent: server, tools, rounds ---------------------------------------------------------

def build_mixed(dest: str, files: int, dirs: int) -> None:
    """The ``mixed`` corpus: ``files`` of the sizes of :data:`MIXED_SIZES` in ``dirs`` directories, the content
    of ``artifactkit.conformance.corpus.content`` (deterministic), every time the corpus time."""
    import random  # noqa: PLC0415

    from artifactkit.conformance.corpus import content  # noqa: PLC0415
    from benches.env import reset_source_atimes  # noqa: PLC0415

    draw = random.Random(53)  # reproducible sizes, not secrets
    sizes = [draw.randint(low, high) for share, low, high in MIXED_SIZES for _ in range(round(share * files))]
    sizes += [MIXED_SIZES[0][1]] * (files - len(sizes))
    draw.shuffle(sizes)
    for index, size in enumerate(sizes[:files]):
        folder = os.path.join(dest, f"d{index % dirs:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{index:05d}.bin"), "wb") as handle:
            handle.write(content(2000 + index, size))
    reset_source_atimes(dest)


def tool_env(endpoint: Any, base: str) -> dict[str, dict[str, str]]:
    """Each tool's environment: the standard AWS variables for the server and nothing of this machine's."""
    from artifactkit.conformance.adapters.rclone_s3 import is_plain_http_loopback  # noqa: PLC0415

    common = {**os.environ, **endpoint.env(), "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
              "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "NO_PROXY": "127.0.0.1,localhost",
              "no_proxy": "127.0.0.1,localhost"}
    common.pop("AWS_PROFILE", None)
    rclone = {**common, "RCLONE_CONFIG": os.path.join(base, "rclone.conf"), "RCLONE_CONFIG_S3T_TYPE": "s3",
              "RCLONE_CONFIG_S3T_PROVIDER": "SeaweedFS", "RCLONE_CONFIG_S3T_ENV_AUTH": "true",
              "RCLONE_CONFIG_S3T_ENDPOINT": endpoint.url, "RCLONE_CONFIG_S3T_REGION": endpoint.region}
    if is_plain_http_loopback(endpoint.url):
        rclone.pop("AWS_CA_BUNDLE", None)  # plain http: no TLS; Debian's rclone 1.60 refuses any bundle
    return {"artifactkit": common, "aws": common, "rclone": rclone}


def commands(tool: str, op: str, ctx: dict[str, Any], *, prefix: str, src: str, dest: str) -> list[str]:
    """The command line of one measured operation; every tool reads and writes the same places."""
    bucket, bins = ctx["bucket"], ctx["bins"]
    if tool == "artifactkit":
        task = {"op": op, "url": f"s3://{bucket}/{prefix}", "src": src, "dest": dest}
        return [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(task)]
    remote = {"rclone": f"s3t:{bucket}/{prefix}", "aws": f"s3://{bucket}/{prefix}"}[tool]
    there, back = (src, remote) if op in ("publish", "republish") else (remote, dest)
    if tool == "rclone":
        return [bins["rclone"], "copy", there, back]
    return [bins["aws"], "s3", "sync", "--only-show-errors", there, back]


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter_ns()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter_ns() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sample: dict[str, Any] = {"ns": elapsed, "cpu_ns": int(cpu * 1e9)}
    if cmd[1:2] == [os.path.abspath(__file__)]:
        sample.update(json.loads(done.stdout))
    return sample


def tree_size(root: str) -> tuple[int, int]:
    files = total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            files += 1
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return files, total


def one_round(ctx: dict[str, Any], corpus: str, round_no: int) -> dict[str, dict[str, Any]]:
    """Every tool up (fresh prefixes), artifactkit again, every tool down; order alternates by round."""
    src, expect = ctx["sources"][corpus], ctx["sizes"][corpus]
    order = TOOLS if round_no % 2 == 0 else tuple(reversed(TOOLS))
    tag = secrets.token_hex(4)
    prefixes = {tool: f"{corpus}-r{round_no}-{tag}/{tool}" for tool in TOOLS}
    out: dict[str, dict[str, Any]] = {}
    for op in ("publish", "download"):
        for tool in order:
            dest = os.path.join(ctx["base"], f"out-{tool}")
            cmd = commands(tool, op, ctx, prefix=prefixes[tool], src=src, dest=dest)
            out[f"{tool}:{op}"] = timed(cmd, ctx["env"][tool])
            if op == "download":
                got = tree_size(dest)
                if got != expect:
                    raise RuntimeError(f"{tool} downloaded {got} (files, bytes) of {corpus}, expected {expect}")
                shutil.rmtree(dest)
        if op == "publish":
            cmd = commands("artifactkit", "republish", ctx, prefix=prefixes["artifactkit"], src=src, dest="")
            out["artifactkit:republish"] = timed(cmd, ctx["env"]["artifactkit"])
    return out


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [s["ns"] / 1e6 for s in samples]
    found: dict[str, Any] = {"median_ms": round(statistics.median(ms), 1), "min_ms": round(min(ms), 1),
                             "max_ms": round(max(ms), 1), "samples_ms": [round(m, 1) for m in ms],
                             "cpu_ms_median": round(statistics.median(s["cpu_ns"] for s in samples) / 1e6, 1)}
    if "op_ns" in samples[0]:
        found["op_ms_median"] = round(statistics.median(s["op_ns"] for s in samples) / 1e6, 1)
        found["calls_per_run"] = samples[-1]["calls"]
        found["blob_put_bytes"] = [s["blob_put_bytes"] for s in samples]
    return found


def bench(ctx: dict[str, Any], corpus: str, rounds: int) -> dict[str, Any]:
    raw: list[dict[str, dict[str, Any]]] = []
    loads = []
    for round_no in range(rounds):
        loads.append(os.getloadavg()[0])
        print(f"  {corpus} round {round_no + 1}/{rounds} (load {loads[-1]:.2f})", file=sys.stderr)
        raw.append(one_round(ctx, corpus, round_no))
    files, size = ctx["sizes"][corpus]
    ops = {key: summarize([r[key] for r in raw]) for key in raw[0]}
    ratios = {}
    for op in ("publish", "download"):
        for peer in PEERS:
            ours, theirs = ops[f"artifactkit:{op}"], ops[f"{peer}:{op}"]
            paired = statistics.median(r[f"artifactkit:{op}"]["ns"] / r[f"{peer}:{op}"]["ns"] for r in raw)
            ratios[f"{op}/{peer}"] = {"paired_median": round(paired, 3),
                                      "of_medians": round(ours["median_ms"] / theirs["median_ms"], 3)}
    return {"files": files, "bytes": size, "rounds": rounds, "loadavg_1m_per_round": loads, "ops": ops,
            "ratios": ratios}


def versions(bins: dict[str, str]) -> dict[str, str]:
    def first(cmd: list[str]) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return (done.stdout or done.stderr).strip().splitlines()[0]

    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {"python": platform.python_version(), "kernel": platform.release(), "nproc": str(os.cpu_count()),
            "artifactkit": version("artifactkit"), "obstore": installed("obstore"), "boto3": installed("boto3"),
            "weed": first([bins["weed"], "version"]), "rclone": first([bins["rclone"], "version"]),
            "aws": first([bins["aws"], "--version"])}


def code_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"),
            "artifactkit_changes_uncommitted": git("status", "--porcelain", "--", "artifactkit").splitlines()}


def _cell(op: dict[str, Any]) -> str:
    return f"{op['median_ms'] / 1e3:.2f} s ({op['min_ms'] / 1e3:.2f}-{op['max_ms'] / 1e3:.2f})"


def render(doc: dict[str, Any]) -> str:
    lines = [f"Run `{doc['command']}` at `{doc['code']['commit'][:7]}`, {doc['rounds']} paired rounds per corpus, "
             f"{doc['versions']['nproc']} cores, server on the same machine. Wall time spawn to exit, median "
             "(min-max); ratio = artifactkit / peer, median of per-round ratios (< 1: artifactkit faster).", "",
             "| corpus | operation | artifactkit | rclone copy | aws s3 sync | ak / rclone | ak / aws |",
             "|---|---|---|---|---|---|---|"]
    order = [name for name in CORPORA if name in doc["results"]]  # the JSON's keys are sorted
    for name in order:
        res = doc["results"][name]
        ops, ratios = res["ops"], res["ratios"]
        shape = f"{name} ({res['files']:,} files, {res['bytes'] / MIB:.1f} MiB)"
        for op, label in (("publish", "publish / up"), ("download", "download / down")):
            lines.append(f"| {shape} | {label} | {_cell(ops[f'artifactkit:{op}'])} | {_cell(ops[f'rclone:{op}'])} "
                         f"| {_cell(ops[f'aws:{op}'])} | {ratios[f'{op}/rclone']['paired_median']:.2f} "
                         f"| {ratios[f'{op}/aws']['paired_median']:.2f} |")
        again = ops["artifactkit:republish"]
        puts = again["calls_per_run"].get("PutObject", 0)
        lines.append(f"| {shape} | re-publish, unchanged | {_cell(again)} | | | blob bytes sent: "
                     f"{max(again['blob_put_bytes'])} | PUTs: {puts}, none to `blobs/` |")
    lines += ["", "Client CPU (user + system of the measured process tree; the server's own CPU is not in it), "
              "median, and the requests artifactkit's client sent in its last round:", "",
              "| corpus | operation | artifactkit CPU | rclone CPU | aws CPU | artifactkit requests |",
              "|---|---|---|---|---|---|"]
    for name in order:
        ops = doc["results"][name]["ops"]
        for op in ("publish", "download", "republish"):
            cpu = [f"{ops[f'{t}:{op}']['cpu_ms_median'] / 1e3:.2f} s" if f"{t}:{op}" in ops else "" for t in TOOLS]
            calls = ", ".join(f"{k} {v:,}" for k, v in ops[f"artifactkit:{op}"]["calls_per_run"].items())
            lines.append(f"| {name} | {op} | {' | '.join(cpu)} | {calls} |")
    load = doc["loadavg_1_5_15"]
    rounds = [f"{x:.1f}" for name in order for x in doc["results"][name]["loadavg_1m_per_round"]]
    lines += ["", f"Load average (1 min) before / after the run: {load['before'][0]:.2f} / {load['after'][0]:.2f}; "
              f"at the start of each round: {', '.join(rounds)}. "
              f"Tools: {doc['versions']['rclone']}; {doc['versions']['aws']}; weed {doc['versions']['weed']}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds per corpus (default %(default)s)")
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these (repeatable)")
    parser.add_argument("--many-files", type=int, default=10_000, help="files of `many` (default %(default)s)")
    parser.add_argument("--mixed-files", type=int, default=5_000, help="files of `mixed` (default %(default)s)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="evidence JSON (default: %(default)s)")
    parser.add_argument("--no-docs", action="store_true", help="do not write the table into docs/s3.md")
    parser.add_argument("--table-from", metavar="FILE", help="re-render the tables of an existing JSON into the docs")
    parser.add_argument("--block", default="bench-s3", help="the generated block of docs/s3.md (default %(default)s)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.table_from:
        from diagnostics.docs_tables import rerender  # noqa: PLC0415

        return rerender(args.table_from, render, "s3.md", args.block)
    # The parent's helpers, imported here: the artifactkit child (--worker, this file run as a script) loads the
    # library alone.
    from benches.env import build_corpus, command_line  # noqa: PLC0415
    from diagnostics.docs_tables import write_table  # noqa: PLC0415
    from tests.support.seaweedfs import find_weed, running_seaweedfs  # noqa: PLC0415

    here = os.path.dirname(sys.executable)
    bins = {"weed": find_weed(), **{t: shutil.which(t, path=f"{here}:{os.environ['PATH']}") or t
                                    for t in ("rclone", "aws")}}
    shapes = dict(CORPORA, many=(args.many_files, 1 << 10, 100), mixed=(args.mixed_files, 0, 50))
    started, load_before = time.monotonic(), os.getloadavg()
    base = tempfile.mkdtemp(prefix="ak-bench-s3-", dir=TMPFS)
    results: dict[str, Any] = {}
    try:
        with running_seaweedfs(os.path.join(base, "weed"), bucket="bench") as endpoint:
            ctx: dict[str, Any] = {"base": base, "bucket": endpoint.bucket, "bins": bins, "sources": {},
                                   "sizes": {}, "env": tool_env(endpoint, base)}
            for name in ("small", *(args.corpus or CORPORA)):
                if name not in ctx["sources"]:
                    ctx["sources"][name] = os.path.join(base, f"src-{name}")
                    if name == "mixed":
                        build_mixed(ctx["sources"][name], shapes[name][0], shapes[name][2])
                    else:
                        build_corpus(ctx["sources"][name], name, *shapes[name])
                    ctx["sizes"][name] = tree_size(ctx["sources"][name])
            print(f"[{time.monotonic() - started:5.0f}s] warm-up round on small (untimed)", file=sys.stderr)
            one_round(ctx, "small", 0)
            for name in args.corpus or CORPORA:
                print(f"[{time.monotonic() - started:5.0f}s] {name}", file=sys.stderr)
                results[name] = bench(ctx, name, args.rounds)
            weed_rss_mib = round(endpoint.rss_kib() / 1024, 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc = {"schema": SCHEMA, "command": command_line(sys.argv[1:] if argv is None else argv, "s3"),
           "rounds": args.rounds, "versions": versions(bins), "code": code_state(),
           "machine": {"loadavg_1_5_15": load_before, "tmpfs": TMPFS, "weed_rss_mib_at_end": weed_rss_mib},
           "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
           "duration_s": round(time.monotonic() - started, 1), "method": __doc__.split("\n\n", 2)[2].strip(),
           "results": results}
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(render(doc))
    if not args.no_docs:
        write_table("s3.md", args.block, render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

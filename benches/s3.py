"""Paired benchmark of a bucket store against ``rclone copy`` and ``aws s3 sync`` (issue 15, item 7).

    python -m benches.s3 [--rounds N] [--corpus NAME ...] [--many-files N] [--mixed-files N] [--no-docs]
    python -m benches.s3 --trees FILES [--rounds N] [--engine native|python]     (from the repository root)

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

``--trees FILES`` (issue 52): ``store.py``'s scale tree (FILES x 256 B, dirs of 100), every file read and directory
listed once first (atimes settled: no tool moves one after). Each round the artifactkit CLI on ``--engine`` and
``rclone copy`` upload and download it (order alternating), whole processes timed as ``store.py``'s scale run (GNU
``time``: peak RSS); then ``store.py``'s tree operations on the last round's store: verify, re-publish after 10
changes (what it stored outside the blobs), ``download --path`` of one directory, ``diff`` (must name the 10).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
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
TREES_SCHEMA: Final = "artifactkit.bench-s3-trees/2"  # /1: both engines in one run, made by 9f2db63
DEFAULT_OUTPUT: Final = "diagnostics/results/bench-s3.json"
TREES_OUTPUT: Final = "diagnostics/results/bench-s3-trees-100k.json"
TMPFS: Final = "/dev/shm"  # noqa: S108 - only a mkdtemp (private, 0700) directory is made in it
CORPORA: Final = {"small": (128, 16 << 10, 4), "many": (10_000, 1 << 10, 100), "large": (1, 256 * MIB, 0),
                   "mixed": (5_000, 0, 50)}
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


def one_round(ctx: dict[str, Any], corpus: str, round_no: int) -> dict[str, dict[str, Any]]:
    """Every tool up (fresh prefixes), artifactkit again, every tool down; order alternates by round."""
    from benches.env import tree_size  # noqa: PLC0415 - the parent's (see main)

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


# -- --trees: issue 52's tree operations, whole CLI processes ----------------------------------

def cli_run(ctx: dict[str, Any], tool: str, *args: str) -> dict[str, Any]:
    """``rclone copy ARGS`` or the ``artifactkit`` console script, timed with its peak RSS (``store.py``'s way)."""
    from benches.store import cli_command, timed_cli  # noqa: PLC0415 - the parent's (see main)

    cmd = [ctx["bins"]["rclone"], "copy", *args] if tool == "rclone" else [*cli_command(), *args]
    return timed_cli(cmd, ctx["cores"], ctx["env"][tool], os.path.join(ctx["base"], "op.time"))


def tree_round(ctx: dict[str, Any], round_no: int) -> tuple[dict[str, dict[str, Any]], str]:
    """Both tools up to fresh prefixes, then down into a fresh directory (checked untimed); order alternates."""
    from benches.env import tree_size  # noqa: PLC0415

    order = ("artifactkit", "rclone") if round_no % 2 == 0 else ("rclone", "artifactkit")
    tag, dest = secrets.token_hex(4), os.path.join(ctx["base"], "dest")
    remote = {"artifactkit": f"s3://{ctx['bucket']}/r{round_no}-{tag}/artifactkit",
              "rclone": f"s3t:{ctx['bucket']}/r{round_no}-{tag}/rclone"}
    up = {"artifactkit": ["publish", "--store", remote["artifactkit"], "--name", "trees", ctx["src"]],
          "rclone": [ctx["src"], remote["rclone"]]}
    down = {"artifactkit": ["download", "--store", remote["artifactkit"], "trees@1", dest],
            "rclone": [remote["rclone"], dest]}
    out = {f"{tool}:publish": cli_run(ctx, tool, *up[tool]) for tool in order}
    for tool in order:
        out[f"{tool}:download"] = cli_run(ctx, tool, *down[tool])
        if (found := tree_size(dest)) != ctx["expect"]:
            raise RuntimeError(f"{tool} downloaded {found} (files, bytes), expected {ctx['expect']}")
        shutil.rmtree(dest)
    return out, remote["artifactkit"]


def listed(endpoint: Any, url: str) -> dict[str, int]:
    """Every object of the store at ``url`` but its leases, with its size (boto3, off the clock)."""
    import boto3  # noqa: PLC0415 - the s3 extra, as the server's readiness probe uses it

    prefix = url.split("/", 3)[3] + "/"
    client = boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
                          aws_secret_access_key=endpoint.secret_key, region_name=endpoint.region)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=endpoint.bucket, Prefix=prefix)
    keys = ((item["Key"][len(prefix):], item["Size"]) for page in pages for item in page.get("Contents", []))
    return {key: size for key, size in keys if not key.startswith("locks/")}


def bench_trees(ctx: dict[str, Any], rounds: int, started: float) -> dict[str, Any]:
    """The paired rounds, then ``store.py``'s tree operations on the last round's store, which holds ``trees@1``."""
    from benches.store import bench_tree_ops  # noqa: PLC0415

    raw, loads = [], []
    for round_no in range(rounds):
        loads.append(round(os.getloadavg()[0], 2))
        print(f"[{time.monotonic() - started:5.0f}s] round {round_no + 1}/{rounds} (load {loads[-1]})", file=sys.stderr)
        got, url = tree_round(ctx, round_no)
        raw.append(got)
    ops = {key: {"samples_s": [r[key]["wall_s"] for r in raw],
                 "median_s": round(statistics.median(r[key]["wall_s"] for r in raw), 3),
                 "cpu_s": round(statistics.median(r[key]["user_s"] + r[key]["sys_s"] for r in raw), 3),
                 "peak_rss_mib": round(max(r[key]["peak_rss_kib"] for r in raw) / 1024, 1)} for key in raw[0]}
    ratios = {op: round(statistics.median(r[f"artifactkit:{op}"]["wall_s"] / r[f"rclone:{op}"]["wall_s"] for r in raw),
                        3) for op in ("publish", "download")}
    loads.append(round(os.getloadavg()[0], 2))
    print(f"[{time.monotonic() - started:5.0f}s] tree operations (load {loads[-1]})", file=sys.stderr)
    trees = bench_tree_ops(ctx["base"], ctx["src"], ctx["cores"], ctx["env"]["artifactkit"], store=url,
                           stored=functools.partial(listed, ctx["endpoint"], url))
    if trees["diff"]["paths"] != sorted(trees["changed_files"]):
        raise RuntimeError(f"diff named {trees['diff']['paths'][:20]}, not the 10 changed files")
    return {"ops": ops, "ratio_to_rclone_paired": ratios, "loadavg_1m_per_round_then_tree_ops": loads,
            "trees": trees, "raw": raw}


def render_trees(doc: dict[str, Any]) -> str:
    res, tree = doc["results"], doc["shape"]

    def cell(op: dict[str, Any]) -> str:
        mib = op["peak_rss_mib"] if "peak_rss_mib" in op else op["peak_rss_kib"] / 1024
        return f"{op.get('median_s', op.get('wall_s')):.1f} s, {mib:.0f} MiB"
    rows = [(op, cell(res["ops"][f"artifactkit:{op}"]), cell(res["ops"][f"rclone:{op}"]),
             f"{res['ratio_to_rclone_paired'][op]:.2f}") for op in ("publish", "download")]
    labels = {"verify": "verify", "republish_10_changed": "re-publish, 10 changed",
              "download_path_one_dir": "download --path (1 dir)", "diff": "diff (names the 10)"}
    rows += [(label, cell(res["trees"][key])) for key, label in labels.items()]
    loads = ", ".join(f"{x:.1f}" for x in res["loadavg_1m_per_round_then_tree_ops"])
    return "\n".join([f"`{doc['command']}` at `{doc['code']['commit'][:7]}`, {doc['engine']} engine, load {loads}:", "",
                      f"| {tree['files']:,} x {tree['bytes_per_file']} B, {tree['dirs']:,} dirs | artifactkit | "
                      "rclone | paired ratio |", "|---|---|---|---|", *(f"| {' | '.join(row)} |" for row in rows), "",
                      f"The re-publish stored {res['trees']['republish_bytes_outside_blobs'] / 1024:.0f} KiB outside "
                      "the blobs."])


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
    parser.add_argument("--trees", type=int, metavar="FILES", help="the tree operations on FILES x 256 B instead")
    parser.add_argument("--engine", choices=("native", "python"), default="native", help="--trees: the engine")
    parser.add_argument("--output", help=f"evidence JSON (default: {DEFAULT_OUTPUT}, --trees: {TREES_OUTPUT})")
    parser.add_argument("--no-docs", action="store_true", help="do not write the table into docs/s3.md")
    parser.add_argument("--table-from", metavar="FILE", help="re-render the tables of an existing JSON into the docs")
    parser.add_argument("--block", help="the generated block of docs/s3.md (default bench-s3, --trees bench-s3-trees)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    # The parent's helpers, imported here: the artifactkit child (--worker, this file run as a script) loads the
    # library alone.
    from benches import env  # noqa: PLC0415
    from diagnostics.docs_tables import rerender, write_table  # noqa: PLC0415
    from tests.support.seaweedfs import find_weed, running_seaweedfs  # noqa: PLC0415

    if args.table_from:
        with open(args.table_from, encoding="utf-8") as handle:
            trees = json.load(handle)["schema"] == TREES_SCHEMA
        return rerender(args.table_from, render_trees if trees else render, "s3.md",
                        args.block or ("bench-s3-trees" if trees else "bench-s3"))
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
                                   "sizes": {}, "env": env.tool_env(endpoint, base, args.engine if args.trees else ""),
                                   "endpoint": endpoint, "cores": len(os.sched_getaffinity(0)),
                                   "src": os.path.join(base, "src")}
            if args.trees:
                env.build_corpus(ctx["src"], "scale", *env.scale_shape(args.trees))
                env.settle_atimes(ctx["src"])
                ctx["expect"] = env.tree_size(ctx["src"])
                results = bench_trees(ctx, args.rounds, started)
            for name in () if args.trees else ("small", *(args.corpus or CORPORA)):
                if name not in ctx["sources"]:
                    ctx["sources"][name] = os.path.join(base, f"src-{name}")
                    if name == "mixed":
                        env.build_mixed(ctx["sources"][name], shapes[name][0], shapes[name][2])
                    else:
                        env.build_corpus(ctx["sources"][name], name, *shapes[name])
                    ctx["sizes"][name] = env.tree_size(ctx["sources"][name])
            if not args.trees:
                print(f"[{time.monotonic() - started:5.0f}s] warm-up round on small (untimed)", file=sys.stderr)
                one_round(ctx, "small", 0)
            for name in () if args.trees else args.corpus or CORPORA:
                print(f"[{time.monotonic() - started:5.0f}s] {name}", file=sys.stderr)
                results[name] = bench(ctx, name, args.rounds)
            weed_rss_mib = round(endpoint.rss_kib() / 1024, 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc = {"schema": TREES_SCHEMA if args.trees else SCHEMA, "rounds": args.rounds,
           "command": env.command_line(sys.argv[1:] if argv is None else argv, "s3"),
           "versions": env.tool_versions(bins), "code": env.code_state(),
           "machine": {"loadavg_1_5_15": load_before, "tmpfs": TMPFS, "weed_rss_mib_at_end": weed_rss_mib},
           "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
           "duration_s": round(time.monotonic() - started, 1), "method": __doc__.split("\n\n", 2)[2].strip(),
           "results": results}
    if args.trees:
        doc.update(engine=args.engine, shape=dict(zip(("files", "bytes_per_file", "dirs"), env.scale_shape(args.trees),
                                                      strict=True)))
    output = args.output or (TREES_OUTPUT if args.trees else DEFAULT_OUTPUT)
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    with open(output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")
    table = (render_trees if args.trees else render)(doc)
    print(table)
    if not args.no_docs:
        write_table("s3.md", args.block or ("bench-s3-trees" if args.trees else "bench-s3"), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

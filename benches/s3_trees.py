"""The bucket store's tree operations at scale (issue 52, item 6) against ``rclone copy``, by whole CLI processes.

    python -m benches.s3_trees [--files 100000] [--rounds 2] [--engine native [--engine python]] [--output F]
    python -m benches.s3_trees --table-from diagnostics/results/bench-s3-trees-100k.json
    (from the repository root)

One run starts a throw-away SeaweedFS (``weed mini`` on loopback free ports, its data dir on tmpfs, as
``s3.py``) and builds the scale tree of ``store.py`` on tmpfs: ``--files`` x 256 B in directories of 100,
deterministic content, historical times. Before any measurement every file is read and every directory listed
once, untimed, so that no tool's reads move an atime afterwards (relatime moves each once): the versions below
then differ only where the benchmark changed them. Every operation is the console script (``artifactkit
--store s3://...``, or ``rclone copy``) under ``taskset`` (every CPU of this process) and GNU ``time``, whose
``%M`` is the process's own peak RSS; the wall time is this parent's clock around the whole process. rclone runs
with its defaults (4 transfers, 8 checkers; its S3 modification times: a metadata header up, a HEAD per object
down).

A round: every tool (artifactkit on each ``--engine``, and rclone) uploads the tree to a fresh prefix, then
downloads it into a fresh directory (checked untimed: file count and bytes); tools in forward order in even
rounds, reversed in odd ones, so each pair runs A-before-B in half the rounds; the ratio artifactkit / rclone is
the median of the per-round ratios. After the rounds, on each engine's last prefix (version 1 there): ``verify``;
then 10 files in 10 directories change (same size, other bytes), and each engine re-publishes (version 2); the
objects it added to the bucket outside the changed files' blobs (tree objects and the manifest: the bucket is
listed before and after, untimed) are counted and summed; ``download --path`` of one directory of version 2;
``diff --json`` of versions 1 and 2, which must name exactly the 10 files. The 1-minute load average is kept at
the start of each round and of the tree operations: the server, the clients and the tree share the cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from benches.env import build_corpus, child_env, code_state, command_line, scale_shape
from benches.s3 import tool_env, tree_size, versions
from benches.store import change_files, cli_command, middle_directory, ten_spread_files, timed_cli, timed_diff

SCHEMA: Final = "artifactkit.bench-s3-trees/1"
DEFAULT_OUTPUT: Final = "diagnostics/results/bench-s3-trees-100k.json"
TMPFS: Final = "/dev/shm"  # noqa: S108 - only a mkdtemp (private, 0700) directory is made in it
NAME: Final = "trees"  # the artifact's name: store.py's timed_diff compares trees@1 and trees@2
BLOCK: Final = "bench-s3-trees"


def settle_atimes(src: str) -> None:
    """Read every file and list every directory once (untimed): relatime has then moved each atime to now, and
    moves none again within a day, whichever tool reads the tree next."""
    for top, _dirs, names in os.walk(src):
        for name in names:
            with open(os.path.join(top, name), "rb") as handle:
                handle.read()


def listed(endpoint: Any, prefix: str) -> dict[str, int]:
    """Every object under ``prefix`` but its leases, with its size (boto3, off the clock)."""
    import boto3  # noqa: PLC0415 - the s3 extra, as the server's readiness probe uses it

    client = boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
                          aws_secret_access_key=endpoint.secret_key, region_name=endpoint.region)
    found: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=endpoint.bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            key = item["Key"][len(prefix) + 1:]
            if not key.startswith("locks/"):
                found[key] = item["Size"]
    return found


class Run:
    """The server, the tree and how one measured process runs."""

    def __init__(self, base: str, endpoint: Any, src: str, engines: list[str]) -> None:
        self.base, self.endpoint, self.src, self.engines = base, endpoint, src, engines
        self.cores = len(os.sched_getaffinity(0))
        self.env = tool_env(endpoint, base)
        self.tools = [f"artifactkit-{engine}" for engine in engines] + ["rclone"]
        self.expect = tree_size(src)

    def url(self, prefix: str) -> str:
        return f"s3://{self.endpoint.bucket}/{prefix}"

    def timed(self, tool: str, *args: str) -> dict[str, Any]:
        if tool == "rclone":
            cmd, env = [shutil.which("rclone") or "rclone", "copy", *args], self.env["rclone"]
        else:
            cmd, env = [*cli_command(), *args], self.ak_env(tool)
        return timed_cli(cmd, self.cores, env, os.path.join(self.base, "op.time"))

    def ak_env(self, tool: str) -> dict[str, str]:
        """The server's variables (``s3.py``'s) on the engine of ``tool``, without what a measured child drops."""
        engine = tool.removeprefix("artifactkit-")
        dropped = set(os.environ) - set(child_env(engine))
        return {**{k: v for k, v in self.env["artifactkit"].items() if k not in dropped}, "ARTIFACTKIT_ENGINE": engine}

    def up(self, tool: str, prefix: str) -> dict[str, Any]:
        if tool == "rclone":
            return self.timed(tool, self.src, f"s3t:{self.endpoint.bucket}/{prefix}")
        return self.timed(tool, "publish", "--store", self.url(prefix), "--name", NAME, self.src)

    def down(self, tool: str, prefix: str) -> dict[str, Any]:
        dest = os.path.join(self.base, "dest")
        if tool == "rclone":
            got = self.timed(tool, f"s3t:{self.endpoint.bucket}/{prefix}", dest)
        else:
            got = self.timed(tool, "download", "--store", self.url(prefix), f"{NAME}@1", dest)
        found = tree_size(dest)
        shutil.rmtree(dest)
        if found != self.expect:
            raise RuntimeError(f"{tool} downloaded {found} (files, bytes), expected {self.expect}")
        return got

    def one_round(self, round_no: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        order = self.tools if round_no % 2 == 0 else list(reversed(self.tools))
        tag = secrets.token_hex(4)
        prefixes = {tool: f"r{round_no}-{tag}/{tool}" for tool in self.tools}
        out = {f"{tool}:publish": self.up(tool, prefixes[tool]) for tool in order}
        out.update({f"{tool}:download": self.down(tool, prefixes[tool]) for tool in order})
        return out, prefixes

    def tree_ops(self, prefixes: dict[str, str]) -> dict[str, Any]:
        chosen, middle = ten_spread_files(self.src), middle_directory(self.src)  # listed: atimes already settled
        ak = [t for t in self.tools if t != "rclone"]
        out: dict[str, Any] = {t: {"verify": self.timed(t, "verify", "--store", self.url(prefixes[t]))} for t in ak}
        before = {t: listed(self.endpoint, prefixes[t]) for t in ak}
        change_files(self.src, chosen)
        new_content = {hashlib.sha256(Path(self.src, path).read_bytes()).hexdigest() for path in chosen}
        for tool in ak:
            url, found = self.url(prefixes[tool]), out[tool]
            found["republish_10_changed"] = self.timed(tool, "publish", "--store", url, "--name", NAME, self.src)
            added = {key: size for key, size in listed(self.endpoint, prefixes[tool]).items()
                     if key not in before[tool] and key.rpartition("/")[2] not in new_content}
            found["outside_blobs"] = {"objects": len(added), "bytes": sum(added.values()),
                                      "manifest_bytes": sum(s for k, s in added.items() if k.startswith("manifests/"))}
            part = os.path.join(self.base, "part")
            found["download_path_one_dir"] = self.timed(tool, "download", "--store", url, f"{NAME}@2", part,
                                                        "--path", middle)
            found["download_path_files"] = tree_size(part)[0]
            shutil.rmtree(part)
            found["diff"] = timed_diff(cli_command(), url, self.cores, self.ak_env(tool), self.base)
            if found["diff"]["paths"] != sorted(chosen):
                raise RuntimeError(f"{tool}: diff named {found['diff']['paths'][:20]}, not the 10 changed files")
        return {"changed_files": chosen, "path": middle, "engines": out}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall_s"] for s in samples]
    return {"samples_s": walls, "median_s": round(statistics.median(walls), 3),
            "user_s": round(statistics.median(s["user_s"] for s in samples), 3),
            "sys_s": round(statistics.median(s["sys_s"] for s in samples), 3),
            "peak_rss_mib": round(max(s["peak_rss_kib"] for s in samples) / 1024, 1)}


def measure(run: Run, rounds: int, started: float) -> dict[str, Any]:
    raw: list[dict[str, dict[str, Any]]] = []
    loads: list[list[float]] = []
    prefixes: dict[str, str] = {}
    for round_no in range(rounds):
        loads.append([round(x, 2) for x in os.getloadavg()])
        print(f"[{time.monotonic() - started:5.0f}s] round {round_no + 1}/{rounds} (load {loads[-1][0]})",
              file=sys.stderr)
        got, prefixes = run.one_round(round_no)
        raw.append(got)
    ops = {key: summarize([r[key] for r in raw]) for key in raw[0]}
    ratios = {f"{tool}:{op}/rclone": round(statistics.median(r[f"{tool}:{op}"]["wall_s"] / r[f"rclone:{op}"]["wall_s"]
                                                            for r in raw), 3)
              for tool in run.tools if tool != "rclone" for op in ("publish", "download")}
    tree_load = [round(x, 2) for x in os.getloadavg()]
    print(f"[{time.monotonic() - started:5.0f}s] tree operations (load {tree_load[0]})", file=sys.stderr)
    return {"ops": ops, "ratios_paired_median": ratios, "loadavg_per_round": loads, "loadavg_tree_ops": tree_load,
            "trees": run.tree_ops(prefixes), "raw": raw}


def _cell(op: dict[str, Any]) -> str:
    return f"{op['wall_s' if 'wall_s' in op else 'median_s']:.1f} s, {_mib(op):.0f} MiB"


def _mib(op: dict[str, Any]) -> float:
    return float(op["peak_rss_mib"]) if "peak_rss_mib" in op else op["peak_rss_kib"] / 1024


def render(doc: dict[str, Any]) -> str:
    res, shape = doc["results"], doc["shape"]
    tools = [t for t in res["tools"] if t != "rclone"]
    lines = [f"| {shape['files']:,} x {shape['bytes_per_file']} B, {shape['dirs']:,} dirs | "
             + " | ".join(t.replace("artifactkit-", "") for t in tools) + " | rclone copy |",
             "|---|" + "---|" * (len(tools) + 1)]
    for op, label in (("publish", "publish / up"), ("download", "download / down")):
        cells = [f"{_cell(res['ops'][f'{t}:{op}'])} ({res['ratios_paired_median'][f'{t}:{op}/rclone']:.2f}x)"
                 for t in tools]
        lines.append(f"| {label} | {' | '.join(cells)} | {_cell(res['ops'][f'rclone:{op}'])} |")
    trees = res["trees"]["engines"]
    rows = (("verify", "verify"), ("republish_10_changed", "re-publish, 10 changed"),
            ("download_path_one_dir", "download --path, 1 dir"), ("diff", "diff names the 10"))
    for key, label in rows:
        lines.append(f"| {label} | {' | '.join(_cell(trees[t][key]) for t in tools)} | |")
    outside = [trees[t]["outside_blobs"] for t in tools]
    lines.append("| stored outside the blobs | " + " | ".join(f"{o['bytes'] / 1024:.0f} KiB, {o['objects']} objects"
                                                           for o in outside) + " | |")
    loads = ", ".join(f"{x[0]:.1f}" for x in [*res["loadavg_per_round"], res["loadavg_tree_ops"]])
    return "\n".join([f"`{doc['command']}` at `{doc['code']['commit'][:7]}`: wall time, peak RSS, (artifactkit / "
                      f"rclone, {doc['rounds']} paired rounds); load {loads}.", "", *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000, help="files of the tree (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="paired rounds (default %(default)s)")
    parser.add_argument("--engine", action="append", choices=("native", "python"), help="repeatable (default native)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="evidence JSON (default: %(default)s)")
    parser.add_argument("--no-docs", action="store_true", help="do not write the table into docs/s3.md")
    parser.add_argument("--table-from", metavar="FILE", help="re-render the table of an existing JSON into the docs")
    args = parser.parse_args(argv)
    if args.table_from:
        from diagnostics.docs_tables import rerender  # noqa: PLC0415

        return rerender(args.table_from, render, "s3.md", BLOCK)
    from diagnostics.docs_tables import write_table  # noqa: PLC0415
    from tests.support.seaweedfs import find_weed, running_seaweedfs  # noqa: PLC0415

    shape = scale_shape(args.files)
    started, load_before = time.monotonic(), os.getloadavg()
    base = tempfile.mkdtemp(prefix="ak-bench-s3-trees-", dir=TMPFS)
    try:
        with running_seaweedfs(os.path.join(base, "weed"), bucket="bench") as endpoint:
            src = os.path.join(base, "src")
            build_corpus(src, "scale", *shape)
            settle_atimes(src)
            results = measure(Run(base, endpoint, src, args.engine or ["native"]), args.rounds, started)
            results["tools"] = [f"artifactkit-{e}" for e in args.engine or ["native"]] + ["rclone"]
            weed_rss_mib = round(endpoint.rss_kib() / 1024, 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    bins = {"weed": find_weed(), "rclone": shutil.which("rclone") or "rclone", "aws": shutil.which("aws") or "aws"}
    doc = {"schema": SCHEMA, "command": command_line(sys.argv[1:] if argv is None else argv, "s3_trees"),
           "rounds": args.rounds, "shape": dict(zip(("files", "bytes_per_file", "dirs"), shape, strict=True)),
           "versions": versions(bins), "code": code_state(), "cores": len(os.sched_getaffinity(0)),
           "weed_rss_mib_at_end": weed_rss_mib,
           "loadavg_1_5_15": {"before": load_before, "after": os.getloadavg()},
           "duration_s": round(time.monotonic() - started, 1), "method": __doc__.split("\n\n", 2)[2].strip(),
           "results": results}
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    print(render(doc))
    if not args.no_docs:
        write_table("s3.md", BLOCK, render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

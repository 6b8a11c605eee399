"""The benchmark's verdicts and tables (benches/report.py), on a made-up run:
each acceptance line passes at its limit and fails just past it, and every table renders from the raw results."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture(scope="module")
def bench() -> dict[str, ModuleType]:
    # benches/ runs from the repository root (python -m benches.store), which pytest puts on sys.path.
    return {name: importlib.import_module(f"benches.{name}") for name in ("report", "rounds", "child")}


def _cell(group: str, op: str, engine: str | None, threads: int, ms: float, *,
          core: float | None = None) -> dict[str, Any]:
    cell = {"group": group, "op": op, "engine": engine, "threads": threads, "cores": threads, "median_ms": ms,
            "min_ms": ms, "max_ms": ms, "cpu_ms": ms, "user_ms": ms / 2, "sys_ms": ms / 2, "files_per_s": 1e3,
            "files_per_s_per_thread": 1e3 / threads, "mib_per_s": 1.0, "peak_rss_mib": 25.0}
    if core is not None:
        cell.update(core_ms=core + 10, threaded_ms=core, serial_ms=ms - core, core_calls={"stage_files": 1})
    return cell


def _ratio(value: float) -> dict[str, float]:
    return {"paired_median": value, "cpu_paired_median": value, "of_medians": value}


def _corpus(name: str, ratios: dict[str, float]) -> dict[str, Any]:
    ops = ("publish", "download") if name == "large" else ("publish", "download", "roundtrip")
    peers = ("cp_a", "sha256") if name == "large" else ("cp_a", "rsync", "copytree")
    cells = {f"native-1t/{op}": _cell("native-1t", op, "native", 1, 400.0, core=300.0) for op in ops}
    cells |= {f"native-2t/{op}": _cell("native-2t", op, "native", 2, 250.0, core=150.0) for op in ops}
    cells |= {f"python/{op}": _cell("python", op, "python", 1, 900.0) for op in ops}
    cells |= {f"peers-{c}c/{p}": _cell(f"peers-{c}c", p, None, c, 200.0) for c in (1, 2) for p in peers}
    digests = {"native-1t/publish": "a", "native-2t/publish": "a", "python/publish": "a"}
    res: dict[str, Any] = {"files": 10_000, "bytes_per_file": 1024, "dirs": 100, "cells": cells,
                           "vs_cp_a": {k: _ratio(ratios.get(k, 1.0)) for k in cells if "/cp_a" not in k},
                           "digests_per_round": [dict(digests), dict(digests)],
                           "speedup": {op: {"from": "native-1t", "to": "native-2t", **_ratio(ratios.get(op, 1.6))}
                                       for op in ops}}
    if name == "large":
        res["share_of_sha256"] = {k: _ratio(ratios.get(f"share/{k}", 0.95)) for k in cells if "python" not in k
                                  and "peers" not in k}
    return res


def _doc(**ratios: float) -> dict[str, Any]:
    by_name = {k.replace("__", "/"): v for k, v in ratios.items()}
    scale_op = {"median_s": 2.0, "user_s": 1.0, "sys_s": 1.0, "peak_rss_mb": 100.0, "peak_rss_mib": 95.4}
    return {
        "command": "python -m benches.store", "rounds": 2,
        "setups": [{"name": "native-1t", "engine": "native", "threads": 1, "cores": 1},
                   {"name": "native-2t", "engine": "native", "threads": 2, "cores": 2},
                   {"name": "python", "engine": "python", "threads": 1, "cores": 1}],
        "environment": {"nproc": 2, "cpu": {"model": "x", "sha_ni": True}, "mem_gib": 1, "kernel": "6",
                        "python": "CPython 3.11", "tools": {"cp": "cp", "rsync": "rsync"},
                        "code_under_test": {"commit": "0" * 40, "artifactkit_changes_uncommitted": []}},
        "loadavg_1_5_15": {"before": [1, 1, 1], "after": [1, 1, 1]},
        "results": {name: _corpus(name, by_name) for name in ("small", "many", "large")},
        "syscalls": {"native-2t": {op: {"per_file": 13.5, "flushes": {"syncfs": 1, "fsync": 5, "fdatasync": 0},
                                        "threads_started": 2, "per_file_by_name": {"openat": 2.0}}
                                   for op in ("publish", "download")}},
        "scale": {"files": 100_000, "bytes_per_file": 256, "dirs": 1000, "cores": 2, "rounds": 3,
                  "engine_name": "native", "cli": ["artifactkit"], "vs_cp_a": {"publish": 1.5, "download": 1.2},
                  "ops": {"publish": dict(scale_op), "download": dict(scale_op), "cp_a": dict(scale_op)},
                  "today": {"publish": {"wall_s": 6.0, "peak_rss_mb": 223}, "download": {"wall_s": 4.8,
                            "peak_rss_mb": 168}, "cp_a": {"wall_s": 3.8}}},
    }


def _verdicts(bench: dict[str, ModuleType], doc: dict[str, Any]) -> dict[str, str]:
    return {row["line"]: row["verdict"] for row in bench["report"].acceptance(doc)}


def _verdict(verdicts: dict[str, str], start: str) -> str:
    [found] = [v for line, v in verdicts.items() if line.startswith(start)]
    return found


def test_a_round_trip_at_its_limit_passes_and_just_past_it_fails(bench: dict[str, ModuleType]) -> None:
    at = _verdicts(bench, _doc(**{"native-2t__roundtrip": 2.0}))
    past = _verdicts(bench, _doc(**{"native-2t__roundtrip": 2.01}))
    assert _verdict(at, "round trip ≤ 2.0x `cp -a` on `many`") == "pass"
    assert _verdict(past, "round trip ≤ 2.0x `cp -a` on `many`") == "fail"
    assert _verdict(at, "goal beyond this step: round trip ≤ 1.3x `cp -a` on `many`") == "fail"


def test_the_default_engine_is_judged_not_the_one_thread_run(bench: dict[str, ModuleType]) -> None:
    verdicts = _verdicts(bench, _doc(**{"native-1t__download": 0.5, "native-2t__download": 1.01}))
    assert _verdict(verdicts, "download of `many`") == "fail"


def test_the_speedup_and_the_large_file_shares_are_judged_at_their_limits(bench: dict[str, ModuleType]) -> None:
    verdicts = _verdicts(bench, _doc(publish=1.5, download=1.49,
                                     **{"share/native-2t/publish": 0.89, "share/native-2t/download": 0.75}))
    assert _verdict(verdicts, "2 threads ≥ 1.5x faster than 1 on `many`: publish") == "pass"
    assert _verdict(verdicts, "2 threads ≥ 1.5x faster than 1 on `many`: download") == "fail"
    assert _verdict(verdicts, "large-file publish throughput") == "fail"
    assert _verdict(verdicts, "large-file download throughput") == "pass"


def test_one_round_with_another_digest_fails_the_same_digest_line(bench: dict[str, ModuleType]) -> None:
    doc = _doc()
    line = "the default and the reference engine publish the same tree"
    assert _verdict(_verdicts(bench, doc), line) == "pass"
    doc["results"]["small"]["digests_per_round"][1]["python/publish"] = "b"
    assert _verdict(_verdicts(bench, doc), line) == "fail"


def test_the_scale_lines_are_judged_only_on_100000_files(bench: dict[str, ModuleType]) -> None:
    doc = _doc()
    doc["scale"]["ops"]["download"]["peak_rss_mb"] = 168.1
    verdicts = _verdicts(bench, doc)
    assert _verdict(verdicts, "scale: publish of 100,000 files by the CLI, at most half") == "pass"
    assert _verdict(verdicts, "scale: download of 100,000 files by the CLI, peak RSS") == "fail"
    small = copy.deepcopy(doc)
    small["scale"]["files"] = 2_000
    assert {v for line, v in _verdicts(bench, small).items() if line.startswith("scale")} == {"not judged"}


def test_the_lines_near_their_limit_are_named_on_either_side_and_no_others(bench: dict[str, ModuleType]) -> None:
    # small's round trip 4 % past its 2.5x (fail), the publish speed-up 3 % above its 1.5x (pass); every other
    # line at least a fifth from its limit (many's round trip at 2.6x is 30 % past its 2.0x: far, not near).
    doc = _doc(**{"native-2t__roundtrip": 2.6, "native-2t__download": 0.5, "publish": 1.55, "download": 2.0,
                  "roundtrip": 2.0, "share/native-2t/publish": 1.2})
    near = bench["report"].near_limits(bench["report"].acceptance(doc))
    assert [(got["line"].split(" (")[0], got["verdict"]) for got in near] == [
        ("round trip ≤ 2.5x `cp -a` on `small`", "fail"), ("2 threads ≥ 1.5x faster than 1 on `many`: publish", "pass")]
    assert [round(got["margin"], 3) for got in near] == [-0.04, 0.033]
    facts = bench["report"].render_blocks(doc)["bench-store-run"]
    assert facts.count("\n  - ") == 2 + 2  # the two near lines, then the two scale ratios
    assert "so 95% of today's cost" in facts  # the publish: 1.5x against 6.0 / 3.8 = 1.58x


def test_the_memory_handed_back_to_the_host_during_a_run_is_said_only_where_it_was_read(
        bench: dict[str, ModuleType]) -> None:
    doc = _doc()
    render = bench["report"].render_blocks
    assert "handed" not in render(doc)["bench-store-run"]  # a kernel without free page reporting
    doc["page_reporting"] = {"before": {"reported_kib": "1024", "page_reporting_order": "5"},
                             "after": {"reported_kib": "3072000", "page_reporting_order": "5"}}
    assert "`page_reporting_order` 5): 2,999 MiB were reported during the run" in render(doc)["bench-store-run"]


def test_the_extrapolation_divides_only_the_time_in_the_cores_threaded_calls(bench: dict[str, ModuleType]) -> None:
    model = bench["report"].extrapolate(_doc())
    assert model is not None
    publish = model["ops"]["publish"]  # 1 thread: 100 ms serial, 300 ms on the core's threads
    assert publish["model_ms"] == {2: 250.0, 8: 137.5, 16: 118.8}
    assert publish["limit_ms"] == 100.0 and publish["serial_share"] == 0.25


def test_every_table_renders_from_a_run_and_none_from_no_run(bench: dict[str, ModuleType]) -> None:
    tables = bench["report"]
    blocks = tables.render_blocks(_doc(**{"native-2t__roundtrip": 2.5}))
    assert tuple(blocks) == tables.BLOCKS
    assert "| round trip ≤ 2.0x `cp -a` on `many` (native-2t) | 2.50x | ≤ 2.0x | **fail** |" in blocks[
        "bench-store-acceptance"]
    assert "model 16 threads" in blocks["bench-store-threads"]
    assert set(tables.render_blocks(None).values()) == {tables.PLACEHOLDER}


def test_the_calls_alone_are_told_beside_the_cores_speedups_where_a_run_measured_them(
        bench: dict[str, ModuleType]) -> None:
    tables = bench["report"]
    doc = _doc()
    assert "calls alone" not in tables.render_blocks(doc)["bench-store-threads"]  # a run without gcc
    many = doc["results"]["many"]
    for op, ms in (("calls_publish", 120.0), ("calls_download", 90.0)):
        many["cells"] |= {f"peers-{c}c/{op}": _cell(f"peers-{c}c", op, None, c, ms / c) for c in (1, 2)}
    many["calls_speedup"] = {op: {"from": "peers-1c", "to": "peers-2c", **_ratio(value)}
                             for op, value in (("calls_publish", 1.2), ("calls_download", 1.45))}
    threads = tables.render_blocks(doc)["bench-store-threads"]
    assert "| a publish's calls alone (`kernel_bound.c`): 1 thread → 2 | 1.20x | 120 → 60 ms |" in threads
    assert "| a download's calls alone (`kernel_bound.c`): 1 thread → 2 | 1.45x | 90 → 45 ms |" in threads
    assert "| many | a publish's calls alone (`kernel_bound.c`) | peer, 2 CPUs |" in (
        tables.render_blocks(doc)["bench-store-engines"])


def test_the_strace_summary_parser_takes_each_call_and_not_the_total(bench: dict[str, ModuleType],
                                                                        tmp_path: Path) -> None:
    out = tmp_path / "strace.txt"
    out.write_text("    calls syscall\n--------- ----------------\n    10004 openat\n        1 syncfs\n"
                   "--------- ----------------\n    10005 total\n")  # strace -c -U calls,name
    assert bench["rounds"].strace_counts(str(out)) == {"openat": 10004, "syncfs": 1}


def test_the_core_clock_counts_each_function_and_only_calls_taking_threads_as_threaded(
        bench: dict[str, ModuleType]) -> None:
    core = ModuleType("fake_native")

    def stage_files(items: list[int], threads: int) -> int:
        return len(items) * threads

    def scan_tree(root: str) -> str:
        return root

    stage_files.__text_signature__ = "(items, threads)"  # as PyO3 records it
    scan_tree.__text_signature__ = "(root)"
    core.stage_files, core.scan_tree, core.Failure = stage_files, scan_tree, RuntimeError
    spent = bench["child"].time_the_core(core)
    assert core.stage_files([1, 2], 2) == 4 and core.scan_tree("r") == "r"
    assert core.scan_tree("again") == "again"
    assert {name: (got["calls"], got["threaded"]) for name, got in spent.items()} == {
        "stage_files": (1, True), "scan_tree": (2, False)}
    assert core.Failure is RuntimeError  # a class is not wrapped

"""The tables of a ``bench_store.py`` run, one generated block of ``docs/performance.md`` each.

Kept apart so ``--table-from`` re-renders kept evidence by today's rules without running anything; the
docs' blocks are exactly these strings (``tests/test_docs_numbers.py``).
"""

from __future__ import annotations

from typing import Any, Final

from bench_acceptance import OP_NAMES, acceptance, default_setup, extrapolate, near_limits

PAGE: Final = "performance.md"
#: The committed run the docs show (its command is the one docs/performance.md gives).
EVIDENCE: Final = "diagnostics/results/bench-store-issue28.json"
#: What every block holds until that run is committed: the docs never show a figure no run produced.
PLACEHOLDER: Final = (f"_Not run yet: `python3 diagnostics/bench_store.py --output {EVIDENCE}` writes this table "
                      "(`--table-from` that file re-writes it)._")
LABELS: Final = {**OP_NAMES, "cp_a": "`cp -a`", "rsync": "`rsync -a --atimes`", "copytree": "`shutil.copytree`",
                 "sha256": "`hashlib.sha256`", "calls_publish": "a publish's calls alone (`kernel_bound.c`)",
                 "calls_download": "a download's calls alone (`kernel_bound.c`)"}


def _fmt(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _r(got: dict[str, Any] | None, field: str = "paired_median", empty: str = "") -> str:
    return f"{got[field]:.2f}" if got else empty


def _pct(got: dict[str, Any] | None) -> str:
    return f"{got['paired_median']:.0%}" if got else ""


def _who(cell: dict[str, Any]) -> str:
    if cell["engine"] is None:
        return f"peer, {cell['cores']} CPU{'s' if cell['cores'] > 1 else ''}"
    if cell["engine"] == "python":
        return "reference (Python), 1 process"
    return f"native, {cell['threads']} thread{'s' if cell['threads'] > 1 else ''}"


def run_line(doc: dict[str, Any]) -> str:
    env, code = doc["environment"], doc["environment"]["code_under_test"]
    loads = doc["loadavg_1_5_15"]
    return (f"Machine: {env['nproc']} cores ({env['cpu']['model']}, SHA-NI {'yes' if env['cpu']['sha_ni'] else 'no'}), "
            f"{env['mem_gib']} GiB, Linux {env['kernel']}, {env['python']}; {env['tools']['cp']}; "
            f"{env['tools']['rsync']}. Code `{code['commit'][:10]}`"
            f"{' (with uncommitted changes)' if code['artifactkit_changes_uncommitted'] else ''}. "
            f"{doc['rounds']} paired rounds; load average (1 min) {loads['before'][0]:.2f} before, "
            f"{loads['after'][0]:.2f} after. Command: `{doc['command']}`")


def _main_table(doc: dict[str, Any]) -> str:
    lines = [run_line(doc), "", "| corpus | operation | engine | median ms | min-max ms | CPU ms (user + sys) | "
             "x `cp -a` | x `cp -a` CPU | files/s | files/s per thread | peak RSS MiB |", "|" + "---|" * 11]
    for corpus in ("small", "many"):
        res = doc["results"].get(corpus)
        if res is None:
            continue
        for key, cell in res["cells"].items():
            ratio = res["vs_cp_a"].get(key)
            per_thread = _fmt(cell["files_per_s_per_thread"]) if cell["engine"] else ""
            lines.append(
                f"| {corpus} | {LABELS[cell['op']]} | {_who(cell)} | {_fmt(cell['median_ms'])} | "
                f"{_fmt(cell['min_ms'])}-{_fmt(cell['max_ms'])} | {_fmt(cell['cpu_ms'])} ({_fmt(cell['user_ms'])} + "
                f"{_fmt(cell['sys_ms'])}) | {_r(ratio, empty='1')} | "
                f"{_r(ratio, 'cpu_paired_median', '1')} | {_fmt(cell['files_per_s'])} | "
                f"{per_thread} | {_fmt(cell['peak_rss_mib']) if cell['peak_rss_mib'] else '?'} |")
    return "\n".join(lines)


def _acceptance_table(doc: dict[str, Any]) -> str:
    lines = ["| acceptance line (issue 28) | measured | limit | verdict |", "|---|---|---|---|"]
    lines += [f"| {r['line']} | {r['measured']} | {r['limit']} | **{r['verdict']}** |" for r in acceptance(doc)]
    return "\n".join(lines)


def _threads_table(doc: dict[str, Any]) -> str:
    res = doc["results"].get("many")
    if res is None or "speedup" not in res:
        return "(not run: needs `many` at 1 and 2 threads)"
    lines = ["| operation (`many`) | speed-up (paired) | CPU, 1 thread → most | files/s per thread | "
             "on the core's threads ms | serial ms |", "|---|---|---|---|---|---|"]
    for op, got in res["speedup"].items():
        low, high = res["cells"][f"{got['from']}/{op}"], res["cells"][f"{got['to']}/{op}"]
        lines.append(f"| {OP_NAMES[op]}: {got['from']} → {got['to']} | {got['paired_median']:.2f}x | "
                     f"{_fmt(low['cpu_ms'])} → {_fmt(high['cpu_ms'])} ms | {_fmt(low['files_per_s_per_thread'])} → "
                     f"{_fmt(high['files_per_s_per_thread'])} | {_fmt(low.get('threaded_ms', 0))} → "
                     f"{_fmt(high.get('threaded_ms', 0))} | {_fmt(low.get('serial_ms', 0))} → "
                     f"{_fmt(high.get('serial_ms', 0))} |")
    for op, got in res.get("calls_speedup", {}).items():
        low, high = res["cells"][f"{got['from']}/{op}"], res["cells"][f"{got['to']}/{op}"]
        lines.append(f"| {LABELS[op]}: 1 thread → {high['cores']} | {got['paired_median']:.2f}x | "
                     f"{_fmt(low['cpu_ms'])} → {_fmt(high['cpu_ms'])} ms |  |  |  |")
    model = extrapolate(doc)
    if model:
        counts = list(next(iter(model["ops"].values()))["model_ms"])
        lines += ["", f"Extrapolation (a model, not a measurement: T(N) = serial + threaded / N from the "
                  f"{model['from']} run; this machine has {doc['environment']['nproc']} cores):", "",
                  "| operation (`many`) | serial share at 1 thread | measured at "
                  f"{model['measured']} ms | " + " | ".join(f"model {n} threads: ms (x `cp -a`; files/s per thread)"
                                                           for n in counts)
                  + " | limit ms (serial part alone) |", "|" + "---|" * (4 + len(counts))]
        for op, got in model["ops"].items():
            measured = next(iter(got["measured_ms"].values()))
            lines.append(f"| {OP_NAMES[op]} | {got['serial_share']:.0%} | {_fmt(measured)} | "
                         + " | ".join(f"{_fmt(got['model_ms'][n])} ({got['model_vs_cp_a'][n]:.2f}x; "
                                      f"{_fmt(got['model_files_per_s_per_thread'][n])})" for n in counts)
                         + f" | {_fmt(got['limit_ms'])} |")
    return "\n".join(lines)


def _large_table(doc: dict[str, Any]) -> str:
    res = doc["results"].get("large")
    if res is None:
        return "(not run: `large`)"
    mib = res["files"] * res["bytes_per_file"] / (1 << 20)
    lines = [f"`large`: one file of {mib:,.0f} MiB.", "",
             "| operation | engine | median ms | MiB/s | share of `hashlib.sha256`'s throughput (paired) | x `cp -a` |",
             "|---|---|---|---|---|---|"]
    for key, cell in res["cells"].items():
        share = res["share_of_sha256"].get(key)
        ratio = res["vs_cp_a"].get(key)
        lines.append(f"| {LABELS[cell['op']]} | {_who(cell)} | {_fmt(cell['median_ms'])} | {_fmt(cell['mib_per_s'])} | "
                     f"{_pct(share)} | {_r(ratio)} |")
    return "\n".join(lines)


def _syscalls_table(doc: dict[str, Any]) -> str:
    found = doc.get("syscalls") or {}
    if not found or "skipped" in found:
        return f"(not run: {found.get('skipped', 'no strace run')})"
    lines = [f"`strace -f -c` of one publish (new content) and one download of `many` "
             f"({doc['results']['many']['files']:,} files), net of an idle child's start-up, per file:", "",
             "| engine | operation | syscalls per file | `syncfs` | `fsync` + `fdatasync` | threads started | "
             "the most frequent, per file |", "|---|---|---|---|---|---|---|"]
    for setup, by_op in found.items():
        for op, got in by_op.items():
            # Sorted here, not by the dict's order: the evidence is written with sort_keys (alphabetical).
            ranked = sorted(got["per_file_by_name"].items(), key=lambda item: (-item[1], item[0]))
            top = ", ".join(f"`{name}` {n:g}" for name, n in ranked[:8])
            flushes = got["flushes"]
            lines.append(f"| {setup} | {op} | {got['per_file']:g} | {flushes['syncfs']} | "
                         f"{flushes['fsync'] + flushes['fdatasync']} | {got['threads_started']} | {top} |")
    return "\n".join(lines)


def _time_table(doc: dict[str, Any]) -> str:
    res = doc["results"].get("many")
    if res is None:
        return "(not run: `many`)"
    lines = ["| operation (`many`) | engine | wall ms | user ms | sys ms | CPU / wall | inside the core ms | "
             "of it on threads ms | serial ms (Python + the core's unthreaded calls) | core calls |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for cell in res["cells"].values():
        if cell["engine"] is None and cell["op"] != "cp_a":
            continue
        core = [_fmt(cell[k]) if k in cell else "" for k in ("core_ms", "threaded_ms", "serial_ms")]
        calls = ", ".join(f"`{name}` {n}" for name, n in cell.get("core_calls", {}).items())
        lines.append(f"| {LABELS[cell['op']]} | {_who(cell)} | {_fmt(cell['median_ms'])} | {_fmt(cell['user_ms'])} | "
                     f"{_fmt(cell['sys_ms'])} | {cell['cpu_ms'] / cell['median_ms']:.2f} | {' | '.join(core)} | "
                     f"{calls} |")
    for op, rows in res.get("profile", {}).items():
        lines += ["", f"cProfile of one {op} of `many` on {default_setup(doc)} (tottime: the time in the function "
                  "itself; the core's calls are builtins of `_native`; profiling inflates every Python call):", "",
                  "| function | calls | tottime ms | cumtime ms |", "|---|---|---|---|"]
        lines += [f"| `{r['function']}` | {r['calls']} | {_fmt(r['tottime_ms'])} | {_fmt(r['cumtime_ms'])} |"
                  for r in rows[:10]]
    return "\n".join(lines)


def _scale_table(doc: dict[str, Any]) -> str:
    scale = doc.get("scale")
    if not scale:
        return "(not run: scale)"
    # The figures are for 100,000 files: beside a smaller run they would compare nothing.
    today = scale["today"] if scale["files"] == 100_000 else {}
    lines = [f"{scale['files']:,} files x {scale['bytes_per_file']} B in {scale['dirs']:,} dirs, tmpfs, whole CLI "
             f"processes (`{' '.join(scale['cli'])} publish/download`) under {scale['cores']} CPUs, engine "
             f"{scale['engine_name']}; medians of {scale['rounds']} rounds; "
             + ("\"before\" is the issue's figure for the code before the native core, on the issue's machine:" if today
                else "no \"before\": the issue's figures are for 100,000 files:"), "",
             "| operation | wall s | before s | x `cp -a` | user s | sys s | peak RSS MB | before MB |",
             "|---|---|---|---|---|---|---|---|"]
    for op in ("publish", "download", "cp_a"):
        got, was = scale["ops"][op], today.get(op, {})
        ratio = scale["vs_cp_a"].get(op)
        lines.append(f"| {LABELS[op]} | {got['median_s']:.2f} | {was.get('wall_s', '')} | "
                     f"{f'{ratio:.2f}' if ratio else '1'} | {got['user_s']:.2f} | {got['sys_s']:.2f} | "
                     f"{got['peak_rss_mb']:g} | {was.get('peak_rss_mb', '')} |")
    return "\n".join(lines)


def _run_facts(doc: dict[str, Any]) -> str:
    """What of this run's hour the verdicts depend on: the peers' own times, the load, the lines near a limit,
    and the scale lines as ratios to the same run's `cp -a` (steadier than seconds across hours)."""
    best, lines = default_setup(doc), []
    cores = max(s["cores"] for s in doc["setups"])
    for corpus in ("many", "small"):
        cell = doc["results"].get(corpus, {}).get("cells", {}).get(f"peers-{cores}c/cp_a")
        if cell:
            lines.append(f"- `cp -a` of `{corpus}` took {_fmt(cell['median_ms'])} ms on {cores} CPUs "
                         f"({cell['sys_ms'] / cell['cpu_ms']:.0%} of its CPU time in the kernel).")
    loads = [load[0] for res in doc["results"].values() for load in res.get("loadavg_per_round", [])]
    if loads:
        lines.append(f"- The load average (1 min) at its rounds was {min(loads):.2f}-{max(loads):.2f}.")
    reporting = doc.get("page_reporting") or {}
    if reporting.get("before") and reporting.get("after"):
        before, after = (int(reporting[k].get("reported_kib", 0)) for k in ("before", "after"))
        lines.append(f"- The machine hands freed memory back to its host (virtio-balloon free page reporting, "
                     f"`page_reporting_order` {reporting['after'].get('page_reporting_order', '?')}): "
                     f"{(after - before) / 1024:,.0f} MiB were reported during the run, memory the host must supply "
                     "again when it is next written.")
    near = near_limits(acceptance(doc))
    lines.append("- Lines within 10% of their limit, which another hour may turn:" if near
                 else "- No line is within 10% of its limit.")
    lines += [f"  - {got['line']}: {got['measured']} against {got['limit']} (**{got['verdict']}**)" for got in near]
    scale = doc.get("scale") or {}
    if scale.get("files") == 100_000 and scale.get("today"):
        today = scale["today"]
        lines.append(f"- The scale runs against this run's `cp -a` under {best}'s CPUs:")
        for op in ("publish", "download"):
            ratio, samples = scale["vs_cp_a"].get(op), scale["ops"][op].get("samples_s")
            was = today[op]["wall_s"] / today["cp_a"]["wall_s"]
            rounds = f" (rounds {min(samples):.2f}-{max(samples):.2f} s)" if samples else ""
            if ratio:
                lines.append(f"  - {op} {ratio:.2f}x{rounds}; the issue's "
                             f"\"today\" was {today[op]['wall_s']:.1f} / {today['cp_a']['wall_s']:.1f} s = {was:.2f}x, "
                             f"so {ratio / was:.0%} of today's cost.")
    return "\n".join(lines)


BLOCKS: Final = ("bench-store-run", "bench-store-acceptance", "bench-store-engines", "bench-store-threads",
                  "bench-store-large", "bench-store-syscalls", "bench-store-time", "bench-store-scale")


def render_blocks(doc: dict[str, Any] | None) -> dict[str, str]:
    """Block name in ``docs/performance.md`` -> its text (the placeholder where no run is kept)."""
    if doc is None:
        return dict.fromkeys(BLOCKS, PLACEHOLDER)
    return {"bench-store-run": _run_facts(doc),
            "bench-store-acceptance": _acceptance_table(doc), "bench-store-engines": _main_table(doc),
            "bench-store-threads": _threads_table(doc), "bench-store-large": _large_table(doc),
            "bench-store-syscalls": _syscalls_table(doc), "bench-store-time": _time_table(doc),
            "bench-store-scale": _scale_table(doc)}


def render_all(doc: dict[str, Any]) -> str:
    return "\n\n".join(f"### {name}\n\n{text}" for name, text in render_blocks(doc).items())

"""What a ``store.py`` run says, derived from its raw results, so kept evidence is re-judged and re-rendered by
today's rules without running anything (``--table-from``): issue 28's acceptance line by line, the extrapolation
to more cores (stated as a model), and the tables, one generated block of ``docs/performance.md`` each (the
docs' blocks are exactly these strings: ``tests/test_docs_numbers.py``).

The engine judged is the default one: the native core at the most threads measured (``workers`` unset
means every usable core, which is what a user gets).
"""

from __future__ import annotations

from typing import Any, Final

#: Each acceptance line of the issue that the benchmark measures: (text, corpus, what, limit, comparison).
RATIO_LINES: Final = (
    ("round trip ≤ 2.0x `cp -a` on `many`", "many", "roundtrip", 2.0, "<="),
    ("round trip ≤ 2.5x `cp -a` on `small`", "small", "roundtrip", 2.5, "<="),
    ("download of `many` (verified, exact) no slower than one `cp -a`", "many", "download", 1.0, "<="),
    ("publish of `many` ≤ 1.25x `cp -a`", "many", "publish", 1.25, "<="),
)
SPEEDUP_OPS: Final = ("roundtrip", "publish", "download")
GOAL: Final = 1.3  # "Goal beyond this step: round trip ≤ 1.3x cp -a"
NOT_MEASURED: Final = (
    "Every earlier test and fault check passes; the syscall-budget test pins the native counts",
    "`docs/performance.md` describes the current engine; history in `CHANGELOG.md`; 8 and 16 cores extrapolated",
)
OP_NAMES: Final = {"publish": "publish", "download": "download", "roundtrip": "round trip"}


#: The functions of each profile shown: the core's calls and the first Python rows (the evidence keeps all).
PROFILE_ROWS: Final = 6


def default_setup(doc: dict[str, Any]) -> str:
    natives = [s for s in doc["setups"] if s["engine"] == "native"]
    return max(natives, key=lambda s: s["threads"])["name"]


def acceptance(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of (line, measured, limit, verdict); a line whose corpus or part was not run says so."""
    results, best = doc["results"], default_setup(doc)
    rows: list[dict[str, Any]] = []

    def row(line: str, value: float | None, text: str, limit: str, ok: bool | None = None, *,
            bound: tuple[float, str] | None = None) -> None:
        # A line with a numeric bound is judged from it, so the verdict and the limit it carries never disagree.
        if bound is not None and value is not None:
            ok = value <= bound[0] if bound[1] == "<=" else value >= bound[0]
        rows.append({"line": line, "value": value, "measured": text, "limit": limit,
                     "verdict": "not run" if ok is None else "pass" if ok else "fail",
                     **({"limit_value": bound[0], "sense": bound[1]} if bound else {})})

    for line, corpus, op, limit, _ in RATIO_LINES:
        got = results.get(corpus, {}).get("vs_cp_a", {}).get(f"{best}/{op}")
        value = got["paired_median"] if got else None
        row(f"{line} ({best})", value, f"{value:.2f}x" if value else "—", f"≤ {limit}x", bound=(limit, "<="))
    speedup = results.get("many", {}).get("speedup", {})
    for op in SPEEDUP_OPS:
        got = speedup.get(op)
        value = got["paired_median"] if got else None
        span = f"{got['to']} over {got['from']}" if got else "needs 1 and 2 threads"
        row(f"2 threads ≥ 1.5x faster than 1 on `many`: {OP_NAMES[op]} ({span})", value,
            f"{value:.2f}x" if value else "—", "≥ 1.5x", bound=(1.5, ">="))
    shares = results.get("large", {}).get("share_of_sha256", {})
    for op, limit in (("publish", 0.90), ("download", 0.75)):
        value = shares.get(f"{best}/{op}", {}).get("paired_median")
        row(f"large-file {op} throughput ≥ {limit:.0%} of `hashlib.sha256`'s ({best})", value,
            f"{value:.0%}" if value else "—", f"≥ {limit:.0%}", bound=(limit, ">="))
    for corpus in ("many", "small"):
        got = results.get(corpus, {}).get("vs_cp_a", {}).get(f"{best}/roundtrip")
        value = got["paired_median"] if got else None
        row(f"goal beyond this step: round trip ≤ {GOAL}x `cp -a` on `{corpus}` ({best})", value,
            f"{value:.2f}x" if value else "—", f"≤ {GOAL}x", bound=(GOAL, "<="))
    same, compared = _same_digests(doc)
    row("the default and the reference engine publish the same tree to the same manifest digest",
        None, f"{same} of {compared} rounds" if compared else "—", "every round",
        None if not compared else same == compared)
    rows += _scale_rows(doc.get("scale"))
    rows += [{"line": line, "value": None, "measured": "not measured by this benchmark (the test suite, review)",
              "limit": "", "verdict": "—"} for line in NOT_MEASURED]
    return rows


def near_limits(rows: list[dict[str, Any]], within: float = 0.10) -> list[dict[str, Any]]:
    """The judged rows whose value lies within ``within`` of their limit (relative to it), on either side: the
    verdicts that another hour of this shared machine may turn. Each with its ``margin`` (positive: passing)."""
    near = []
    for got in rows:
        if got.get("limit_value") and got["value"] is not None and got["verdict"] in ("pass", "fail"):
            limit, value = got["limit_value"], got["value"]
            margin = (limit - value) / limit if got["sense"] == "<=" else (value - limit) / limit
            if abs(margin) <= within:
                near.append({**got, "margin": margin})
    return near


def _same_digests(doc: dict[str, Any]) -> tuple[int, int]:
    """Rounds (over every corpus) where every setup's publish and round trip made one manifest digest,
    counted only where the reference and a native setup both published."""
    same = compared = 0
    for res in doc["results"].values():
        for by_cell in res.get("digests_per_round", []):
            engines = {key.split("/")[0].split("-")[0] for key in by_cell}
            if {"native", "python"} <= engines:
                compared += 1
                same += len(set(by_cell.values())) == 1
    return same, compared


def _scale_rows(scale: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for op in ("publish", "download"):
        today = (scale or {}).get("today", {}).get(op, {})
        got = (scale or {}).get("ops", {}).get(op)
        full = bool(scale) and scale["files"] == 100_000
        where = "" if full else f" ({scale['files']:,} files: not the issue's 100,000)" if scale else " (not run)"
        for field, unit, limit in (("wall_s", "s", today.get("wall_s", 0) / 2),
                                   ("peak_rss_mb", "MB", today.get("peak_rss_mb", 0))):
            value = got[field if field != "wall_s" else "median_s"] if got else None
            what = "at most half today's time" if field == "wall_s" else "peak RSS no higher than today's"
            rows.append({"line": f"scale: {op} of 100,000 files by the CLI, {what}{where}",
                         "value": value, "measured": f"{value:g} {unit}" if value is not None else "—",
                         "limit": f"≤ {limit:g} {unit}" if today else "",
                         "verdict": "not run" if value is None else "not judged" if not full else
                         "pass" if value <= limit else "fail",
                         **({"limit_value": limit, "sense": "<="} if full and today else {})})
    return rows


def extrapolate(doc: dict[str, Any], cores: tuple[int, ...] = (2, 8, 16)) -> dict[str, Any] | None:
    """A model, not a measurement: the serial wall time (the Python thread, and the core's calls that take no
    ``threads``) stays; the time in the core's threaded calls (``threaded_ms``, measured at 1 thread) divides
    by the threads. T(N) = serial + threaded / N. The 2-thread prediction is set beside the measured 2-thread
    run, which says how far the model holds on this machine; nothing above its cores is measured."""
    res = doc["results"].get("many")
    natives = sorted((s for s in doc["setups"] if s["engine"] == "native"), key=lambda s: s["threads"])
    if not res or not natives or natives[0]["threads"] != 1:
        return None
    one, top = natives[0]["name"], natives[-1]["name"]
    cp_ms = res["cells"][f"peers-{natives[-1]['cores']}c/cp_a"]["median_ms"]
    files = res["files"]
    found: dict[str, Any] = {"cp_a_ms": cp_ms, "files": files, "from": one, "measured": top, "ops": {}}
    for op in SPEEDUP_OPS:
        cell = res["cells"][f"{one}/{op}"]
        if "threaded_ms" not in cell:
            return None
        serial, threaded = cell["serial_ms"], cell["threaded_ms"]
        at = {n: serial + threaded / n for n in cores}
        found["ops"][op] = {
            "serial_ms": serial, "threaded_ms": threaded, "serial_share": round(serial / (serial + threaded), 3),
            "measured_ms": {natives[-1]["threads"]: res["cells"][f"{top}/{op}"]["median_ms"]},
            "model_ms": {n: round(t, 1) for n, t in at.items()},
            "model_vs_cp_a": {n: round(t / cp_ms, 2) for n, t in at.items()},
            "model_files_per_s_per_thread": {n: round(files / (t / 1e3) / n) for n, t in at.items()},
            "limit_ms": round(serial, 1)}
    return found


PAGE: Final = "performance.md"
#: The committed run the docs show (its command is the one docs/performance.md gives).
EVIDENCE: Final = "diagnostics/results/bench-store-issue28.json"
#: What every block holds until that run is committed: the docs never show a figure no run produced.
PLACEHOLDER: Final = (f"_Not run yet: `python -m benches.store --output {EVIDENCE}` writes this table "
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
                  for r in rows[:PROFILE_ROWS]]
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

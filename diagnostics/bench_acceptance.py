"""Issue 28's acceptance, line by line, judged from a run's raw results (so kept evidence is re-judged by
today's rules without running anything), and the extrapolation to more cores, stated as a model.

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

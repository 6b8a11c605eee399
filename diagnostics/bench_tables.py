"""The benchmark's vocabulary and its tables: what ``bench_store.py`` measures and how it reports it.

Kept apart so ``--table-from`` re-renders kept evidence by today's rules without running anything.
"""

from __future__ import annotations

from typing import Any, Final

CORPORA: Final = {"small": (128, 16 << 10, 4), "many": (10_000, 1 << 10, 100), "large": (1, 256 << 20, 0)}
QUICK_CORPORA: Final = {"small": (32, 16 << 10, 4), "many": (500, 1 << 10, 10), "large": (1, 16 << 20, 0)}
AK_OPS: Final = ("ak_publish", "ak_republish", "ak_download", "ak_roundtrip")
PEERS: Final = ("cp_a", "rsync", "copytree", "sha256", "cp_a_sha256")
LABELS: Final = {
    "ak_publish": "artifactkit publish (new)", "ak_republish": "artifactkit publish again",
    "ak_download": "artifactkit download", "ak_roundtrip": "artifactkit round trip", "cp_a": "cp -a",
    "rsync": "rsync -a --atimes", "copytree": "shutil.copytree", "sha256": "hashlib.sha256 (floor)",
    "cp_a_sha256": "cp -a + sha256 (floor)",
}
# Syscalls the allocator and the scheduler make; they are not per-file work (see the budget test).

# -- the tables ----------------------------------------------------------------------------------

def _fmt(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _ordered(mapping: dict[str, Any]) -> list[tuple[str, Any]]:
    # The JSON has sorted keys; tables read best tmpfs first (the stable measure), corpora by size.
    rank = ["tmpfs", "default-tmp", *CORPORA]
    return sorted(mapping.items(), key=lambda kv: rank.index(kv[0]) if kv[0] in rank else len(rank))


def render_tables(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [f"Machine: {env['nproc']} cores, {env['mem_gib']} GiB, Linux {env['kernel']}, {env['python']}; "
             f"{env['tools']['cp']}; {env['tools']['rsync']}. Medians of {doc['repeats']} rounds; ratios are "
             "medians of per-round (paired) ratios; warm page cache; `sync` before each run.", ""]
    ratio_head = " | ".join(f"x {LABELS[p].split(' (')[0]}" for p in PEERS)
    for label, by_corpus in _ordered(doc["results"]):
        where = env["locations"][label]
        lines += [f"#### {label}: {where.get('fs_type', '?')} ({','.join(where.get('mount_options', []))})", "",
                  f"| corpus | operation | median ms | min-max ms | files/s | MiB/s | peak RSS MiB | {ratio_head} |",
                  "|" + "---|" * (7 + len(PEERS))]
        for corpus, res in _ordered(by_corpus):
            for op in (*AK_OPS, *PEERS):
                s = res["ops"][op]
                ratios = res["ratios"].get(op, {})
                cells = [f"{ratios[p]['paired_median']:.2f}" if p in ratios else "" for p in PEERS]
                lines.append(f"| {corpus} | {LABELS[op]} | {_fmt(s['median_ms'])} | {_fmt(s['min_ms'])}-"
                             f"{_fmt(s['max_ms'])} | {_fmt(s['files_per_s'])} | {_fmt(s['mib_per_s'])} | "
                             f"{_fmt(s['peak_rss_mib']) if s['peak_rss_mib'] else '?'} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["#### Targets (issue 7)", "", "| fs | corpus | target | measured | limit | met |",
              "|---|---|---|---|---|---|"]
    for t in targets(doc["results"]):  # derived from the raw results, so old evidence re-renders by today's rules
        lines.append(f"| {t['location']} | {t['corpus']} | {t['target']} | {t['value']:.2f} | {t['limit']} | "
                     f"{'yes' if t['ok'] else 'no'} |")
    lines += ["", "#### Syscalls and flushes per publish / download (strace -f -c, net of interpreter start-up)", "",
              "| fs | corpus | publish syscalls/file | fsync | syncfs | download syscalls/file |",
              "|---|---|---|---|---|---|"]
    for label, by_corpus in _ordered(doc["results"]):
        for corpus, res in _ordered(by_corpus):
            sc = res.get("syscalls", {})
            if "ak_publish" in sc:
                lines.append(f"| {label} | {corpus} | {sc['ak_publish']['per_file']} | "
                             f"{sc['ak_publish']['flushes']['fsync']} | {sc['ak_publish']['flushes']['syncfs']} | "
                             f"{sc['ak_download']['per_file']} |")
    return "\n".join(lines)


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each as measured value against its limit (ratios of paired medians)."""
    found = []
    for label, by_corpus in _ordered(results):
        for corpus, res in _ordered(by_corpus):
            r, ops = res["ratios"], res["ops"]
            rt_cp, rt_rsync = r["ak_roundtrip"]["cp_a"]["paired_median"], r["ak_roundtrip"]["rsync"]["paired_median"]
            speedup = ops["ak_publish"]["median_ms"] / ops["ak_republish"]["median_ms"]
            checks = [("round trip / rsync -a --atimes", rt_rsync, "< 1.0", rt_rsync < 1.0),
                      ("publish / publish again", speedup, ">= 3.0", speedup >= 3.0)]
            for op in ("ak_publish", "ak_download"):
                floor = r[op]["cp_a_sha256"]["paired_median"]
                checks.append((f"{op[3:]} / (cp -a + sha256)", floor, "<= 1.25", floor <= 1.25))
            if corpus != "large":  # the issue sets the 2x-of-cp round trip for small and many only
                checks.insert(0, ("round trip / cp -a", rt_cp, "<= 2.0", rt_cp <= 2.0))
            else:
                for op, limit in (("ak_publish", 0.90), ("ak_download", 0.75)):
                    share = 1 / r[op]["sha256"]["paired_median"]
                    checks.append((f"{op[3:]} MiB/s / sha256 MiB/s", share, f">= {limit}", share >= limit))
            found += [{"location": label, "corpus": corpus, "target": target, "value": round(value, 3),
                       "limit": limit_text, "ok": ok} for target, value, limit_text, ok in checks]
    return found



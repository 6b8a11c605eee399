"""Run every named adapter whose tool is installed through the conformance kit; keep the findings.

    python3 diagnostics/real_stores.py [--base DIR] [--corpus NAME ...] [--adapter NAME ...]

Writes ``diagnostics/results/real-stores.json`` (schema ``artifactkit.real-stores/1``: tool versions,
every command each adapter ran, one ``artifactkit.conformance/1`` document per adapter and corpus tree,
or the setup error with its whole stderr; sanitized: no absolute paths, user or host names) and the
findings table in ``docs/real-stores.md``. Every cell comes from this run; only the advice is typed in.

Each corpus tree runs on its own, so a store that cannot take one tree (dvc and a dangling link) still
gets verdicts from the others, and the tree it refused is listed with the tool's own message.
dvc and mlflow are looked for on ``PATH`` and through ``ARTIFACTKIT_MLFLOW_PYTHON``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from artifactkit.conformance import adapters
from artifactkit.conformance.checks import CHECKS, check
from artifactkit.conformance.corpus import corpus_names
from artifactkit.errors import CopierSetupError, ToolMissingError

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "real-stores.json"
DOC = HERE.parent / "docs" / "real-stores.md"
SCHEMA = "artifactkit.real-stores/1"

#: What each store's users can do about what the table shows (from the tools' docs; see the modules).
ADVICE = {
    "restic": "Back up with `restic backup --with-atime` (atime is not stored by default and comes back "
              "as the mtime). restic 0.14 keeps no node for the backed-up directory itself: the restored "
              "root gets mode 0700 and the restore's times; back up its parent, or re-apply them.",
    "borg": "Use `borg create --atime` (borg 1.2 stores no atime by default). See borg-atime for the "
            "clamps that remain.",
    "borg-atime": "borg 1.2 clamps every time to 1970-01-01 ... 2038-01-17T03:14:07 (2**31-1 minus 48 h) "
                  "at archive time: nothing restores times outside that window. The extract directory's "
                  "mtime moves as files are written into it: re-apply it afterwards.",
    "dvc": "DVC keeps content only (its `.dir` manifest has md5 and relpath): modes, times and symlinks "
           "are lost and `dvc add` refuses a dangling link. Keep a metadata manifest beside the data and "
           "re-apply it after `dvc pull`, or `dvc add` a `tar --format=posix` archive of the tree.",
    "mlflow": "`log_artifacts`/`download_artifacts` are `shutil.copy2` hops: directory modes and times, "
              "owners and links are lost, atime is the copy's. Log a `tar --format=posix` archive "
              "instead of a tree; resolve dangling links first (they abort `log_artifacts`).",
    "rclone": "Run `rclone copy -M --links --create-empty-src-dirs` (see rclone-metadata): the defaults keep "
              "content and mtime only, drop symlinks and empty directories.",
    "rclone-metadata": "rclone 1.60 sets no directory times and no setuid/setgid/sticky bits; atime is "
                       "the value after rclone's own read of the source, so copy from a noatime "
                       "(or FS_NOATIME_FL) source.",
    "zip": "`unzip -K -X` restores setuid/setgid/sticky and owners. Nothing in zip keeps sub-second times, "
           "times before 1980 or symlink times.",
    "zipfile": "Python's zipfile keeps bytes only (no times, modes or links on extract): use tarfile or "
               "GNU tar for trees whose metadata matters.",
    "tarfile": "tarfile takes mtime from the float `st_mtime` and has no atime: write `pax_headers` "
               "with ns times from `st_*_ns` and re-apply them with `os.utime(ns=..., "
               "follow_symlinks=False)` after `extractall`, or use GNU tar (tar-posix).",
    "tar-posix": "Nothing to do: `--format=posix --atime-preserve=system` on create and `--incremental` "
                 "on extract (see its module) keep everything the kit checks.",
}


#: Failures checked by hand once, outside the kit (restic 0.14.0, borg 1.2.4; edge-times; TZ=UTC stat -c
#: '%n mode=%a mtime=%y atime=%x'): the source line, then the restored one.
HAND_CHECKED = {
    "restic: atime set-to-mtime (`restic backup`, `restic restore latest --target`)": [
        "src/setuid-tool mode=4755 mtime=2011-03-13 07:06:40.123456789 +0000 atime=2011-03-13 07:06:40.223456789 +0000",
        "dst/setuid-tool mode=4755 mtime=2011-03-13 07:06:40.123456789 +0000 atime=2011-03-13 07:06:40.123456789 +0000",
    ],
    "borg-atime: mtime and atime clamped (`borg create --atime`, `borg extract`)": [
        "src/post-2038.txt mtime=2100-01-01 00:00:00.123456789 +0000 atime=2038-01-19 03:14:08.000000001 +0000",
        "dst/post-2038.txt mtime=2038-01-17 03:14:07.000000000 +0000 atime=2038-01-17 03:14:07.000000000 +0000",
        "src/pre-1970.txt mtime=1966-10-31 14:13:19.876543211 +0000 atime=1969-12-31 23:59:58.999999999 +0000",
        "dst/pre-1970.txt mtime=1970-01-01 00:00:00.000000000 +0000 atime=1970-01-01 00:00:00.000000000 +0000",
    ],
}


def run_adapter(name: str, trees: list[str], base: str | None) -> dict[str, Any]:
    """One adapter over each tree: its version, commands, reports or setup errors, and a summary."""
    try:
        version = adapters.version(name)
    except ToolMissingError as err:
        return {"adapter": name, "installed": False, "reason": str(err)}
    log: list[str] = []
    runs: dict[str, Any] = {}
    started = time.monotonic()
    for tree in trees:
        mark = len(log)
        try:
            runs[tree] = check(adapters.runner(name, log), corpus=[tree], base=base).to_json()
        except CopierSetupError as err:
            context = err.context
            runs[tree] = {"setup_error": str(err).split("\n", 1)[0], "command": context.get("command"),
                          "stderr": context.get("stderr")}
        runs[tree]["commands"] = log[mark:]
    return {"adapter": name, "installed": True, "version": version, "wall_s": round(time.monotonic() - started, 1),
            "commands": runs[trees[0]]["commands"], "runs": runs, "summary": summarize(runs)}


def summarize(runs: dict[str, Any]) -> dict[str, Any]:
    """Per check: passed (bool, or None when no tree ran) and every diagnosis with the trees showing it."""
    summary: dict[str, Any] = {}
    ran = [doc for doc in runs.values() if "checks" in doc]
    for name in CHECKS:
        diagnoses: dict[str, set[str]] = {}
        for doc in ran:
            item = next(c for c in doc["checks"] if c["check"] == name)
            for group in item["failures"]:
                label = f"{group['field'].removesuffix('_ns')}: {group['diagnosis']}"
                diagnoses.setdefault(label, set()).add(group["corpus"])
        summary[name] = {"passed": (not diagnoses) if ran else None,
                         "diagnoses": {k: sorted(v) for k, v in sorted(diagnoses.items())}}
    return summary


def cell(entry: dict[str, Any]) -> str:
    if entry["passed"] is None:
        return "not run"
    if entry["passed"]:
        return "pass"
    return "<br>".join(f"**{label}**" for label in entry["diagnoses"])


def write_doc(doc: dict[str, Any], path: Path) -> None:
    lines = [
        "# Real stores through the conformance kit", "",
        "Generated by `diagnostics/real_stores.py` from the run kept in "
        "[`diagnostics/results/real-stores.json`](../diagnostics/results/real-stores.json); only the advice "
        "is written by hand. Each store stores every corpus tree and restores it the way its own docs say "
        "(the exact commands are in the JSON and in each adapter's module, "
        "`artifactkit/conformance/adapters/`); `artifactkit conformance --copier NAME` repeats any row.", "",
        f"Run: `{doc['command']}` on {doc['environment']['kernel']}, Python {doc['environment']['python']}, "
        f"source {doc['environment']['source_fs']}, destination {doc['environment']['destination_fs']}; "
        f"corpus trees: {', '.join(doc['corpus'])}.", "",
        "A cell names every diagnosis seen for that check (field: diagnosis); `pass` means it held on every "
        "tree the store could take.", "",
        "| store | version | " + " | ".join(CHECKS) + " |",
        "|---|---|" + "---|" * len(CHECKS),
    ]
    notes: list[str] = []
    for item in doc["adapters"]:
        if not item["installed"]:
            lines.append(f"| {item['adapter']} | not installed | " + " | ".join("—" for _ in CHECKS) + " |")
            notes.append(f"- **{item['adapter']}** could not run here: {item['reason']}")
            continue
        cells = " | ".join(cell(item["summary"][name]) for name in CHECKS)
        lines.append(f"| {item['adapter']} | {item['version']} | {cells} |")
        for tree, run in item["runs"].items():
            if "setup_error" in run:
                notes.append(f"- **{item['adapter']}** refused tree `{tree}`: `{run['setup_error']}`")
    lines += ["", "## Trees a store could not take", "", *(notes or ["None."]), "",
              "## What each store's users should do", ""]
    lines += [f"- **{name}**: {text}" for name, text in ADVICE.items()]
    lines += ["", "## Checked by hand", "", "Outside the kit, with `stat` (source line, then restored line):", ""]
    for title, stat_lines in HAND_CHECKED.items():
        lines += [f"- {title}", "", "  ```", *(f"  {line}" for line in stat_lines), "  ```", ""]
    lines += ["Every other failure in the table is from the kit only; checking each by hand is still to do.",
              "", "## Reading the diagnoses", "",
              "`set-to-mtime`: atime was given the mtime value (the store keeps no atime). `clamped`: the value "
              "landed on a range edge (0, 1980-01-01, 2**31-1, borg's 2**31-1 minus 48 h). `omitted`: the value "
              "is the copy's own time, not the source's. `advanced-by-read`: moved forward by a read "
              "(for `source_atime_untouched`: the store's own read of the source). "
              "`second-truncated`/`float-rounded`: precision lost on the way.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="where sources and destinations are made (default: the temp dir)")
    parser.add_argument("--corpus", action="append", help="a corpus tree (repeatable; default: all)")
    parser.add_argument("--adapter", action="append", help="an adapter (repeatable; default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--doc-only", action="store_true", help="rewrite the doc from the kept JSON, run nothing")
    args = parser.parse_args(argv)
    if args.doc_only:
        write_doc(json.loads(args.output.read_text()), args.doc)
        return 0
    trees = args.corpus or corpus_names()
    names = args.adapter or list(adapters.ADAPTERS)
    results = []
    for name in names:
        sys.stderr.write(f"real stores: {name}\n")
        results.append(run_adapter(name, trees, args.base))
    environment: dict[str, str] = next((run["environment"] for item in results if item["installed"]
                        for run in item["runs"].values() if "environment" in run), {})
    shown = ["python3", "diagnostics/real_stores.py", *(argv if argv is not None else sys.argv[1:])]
    env_names = [k for k in ("ARTIFACTKIT_MLFLOW_PYTHON",) if k in os.environ]
    doc = {"schema": SCHEMA, "command": " ".join(shown), "environment_variables_set": env_names,
           "environment": {**environment, "machine": platform.machine()}, "corpus": trees, "adapters": results}
    text = json.dumps(doc, sort_keys=True, indent=2)
    for secret in {os.path.expanduser("~"), os.uname().nodename, args.base or "", str(HERE.parent)} - {"", "/"}:
        text = text.replace(secret, "<redacted>")
    args.output.write_text(text + "\n")
    write_doc(json.loads(text), args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

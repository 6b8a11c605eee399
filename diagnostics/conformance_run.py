"""Run the conformance kit over common copy tools and our store; keep the evidence, print the table.

    python -m diagnostics.conformance_run [--base DIR] [--corpus NAME ...] [--output FILE]

Writes ``diagnostics/results/conformance.json`` (one ``artifactkit.conformance/1`` document per
copier, tool versions, the command; sanitized: no absolute paths, user or host names) and prints
a Markdown table for the README. Every cell comes from this run; nothing is typed in by hand.

What tar really does (GNU tar 1.34, read in ``extract.c`` and confirmed by these rows): the default
archive format stores whole-second mtimes (``--format=posix`` keeps ns); ``--atime-preserve`` only
concerns the *source* on create (``=replace`` puts its atime back with ``utime``, changing ctime;
``=system`` reads with ``O_NOATIME``); and extraction sets every atime to the time extraction
started unless ``--incremental`` is given, which restores the archived atime. With ``--xattrs``
(``xattrs.c`` ``xattrs_kw_included``) extraction restores only ``user.*`` names unless
``--xattrs-include`` widens it; ``--acls`` carries POSIX ACLs as ``SCHILY.acl.*`` pax records.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from artifactkit.conformance.checks import CHECKS, Report, check
from artifactkit.conformance.copiers import ARTIFACTKIT, CopyFailedError, NamedCopier, argv_copier, resolve_copier
from diagnostics.docs_tables import write_table

RESULTS = Path(__file__).resolve().parent / "results" / "conformance.json"
SCHEMA = "artifactkit.conformance-run/1"


def tar_round_trip(create: Sequence[str], extract: Sequence[str]) -> NamedCopier:
    """``tar -c`` the source into an archive beside ``dst``, then ``mkdir dst`` and ``tar -x`` into it."""
    # Plain joins: shlex.join would quote the placeholders and make the README harder to read.
    label = (f"tar {' '.join([*create, '-cf', 'A', '-C', '{src}', '.'])}; mkdir {{dst}}; "
             f"tar {' '.join([*extract, '-xf', 'A', '-C', '{dst}'])}")

    def run(src: str, dst: str) -> None:
        with tempfile.TemporaryDirectory(prefix=".tar-", dir=os.path.dirname(dst)) as scratch:
            archive = os.path.join(scratch, "A")
            steps = [["tar", *create, "-cf", archive, "-C", src, "."], None,
                     ["tar", *extract, "-xf", archive, "-C", dst]]
            for argv in steps:
                if argv is None:
                    os.mkdir(dst, 0o700)
                    continue
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                # tar warns about pre-1970 and future stamps and exits 0: only a failure counts.
                if done.returncode != 0:
                    first = (done.stderr.strip().splitlines() or ["no message"])[0]
                    raise CopyFailedError(f"exit status {done.returncode}: {first.replace(archive, 'A')}")

    return NamedCopier(label, run)


def _copytree(*, symlinks: bool = False) -> NamedCopier:
    return NamedCopier(f"shutil.copytree(src, dst{', symlinks=True' if symlinks else ''})",
                       lambda src, dst: shutil.copytree(src, dst, symlinks=symlinks))


def copiers() -> list[NamedCopier]:
    """The tools the README compares, in table order."""
    posix = ["--format=posix", "--atime-preserve=system"]
    # Issue 12's rows: xattrs and ACLs travel only in the posix (pax) format; --incremental on extract
    # restores the archived atimes; holes are kept only with --sparse on create.
    xattrs = ["--xattrs", "--acls"]
    templates = ["cp -a {src} {dst}", "cp -R --preserve=all {src} {dst}",
                 "cp -r --preserve=mode,timestamps {src} {dst}", "rsync -a {src}/ {dst}",
                 "rsync -a --atimes {src}/ {dst}", "rsync -a --atimes --open-noatime {src}/ {dst}",
                 "rsync -aHAXS --atimes {src}/ {dst}"]
    found: list[NamedCopier] = [argv_copier(shlex.split(t), label=t) for t in templates]
    found += [tar_round_trip([], ["-p"]), tar_round_trip(posix, ["-p"]),
              tar_round_trip(posix, ["-p", "--incremental"]),
              tar_round_trip([*posix, *xattrs], ["-p", "--incremental", *xattrs]),
              tar_round_trip([*posix, *xattrs, "--sparse"], ["-p", "--incremental", *xattrs]),
              _copytree(), _copytree(symlinks=True), resolve_copier(ARTIFACTKIT)]
    return found


def tool_versions() -> dict[str, str]:
    versions = {}
    for tool in ("cp", "rsync", "tar"):
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
        versions[tool] = " ".join((out.splitlines() or ["unknown"])[0].split())
    versions["python"] = sys.version.split()[0]
    return versions


def markdown(reports: Sequence[Report], command: str) -> str:
    return markdown_from_evidence({"command": command, "results": [report.to_json() for report in reports]})


def markdown_from_evidence(doc: dict[str, Any]) -> str:
    """The README table from an evidence document (also a kept file: no rerun needed)."""
    header = ["copier", *CHECKS]
    lines = ["| " + " | ".join(f"`{h}`" if h in CHECKS else h for h in header) + " |",
             "|" + "---|" * len(header)]
    for result in doc["results"]:
        by_name = {c["check"]: c for c in result["checks"]}
        cells = ["pass" if by_name[n]["passed"] else f"**fail**: {by_name[n]['diagnosis']}" for n in CHECKS]
        label = result["copier"].replace("|", "\\|")
        lines.append("| " + " | ".join([f"`{label}`", *cells]) + " |")
    env = doc["results"][0]["environment"]
    lines += ["", f"Generated by `{doc['command']}` (source on {env['source_fs']}, the copier's destination on "
                  f"{env['destination_fs']} with reads moving atime as there, the kit's own read for "
                  f"`survives_read` isolated by {env['isolation']}; evidence in "
                  "`diagnostics/results/conformance.json`)."]
    return "\n".join(lines)


def sanitized_command(argv: Sequence[str]) -> str:
    # Evidence carries no absolute paths: a path argument is recorded by its role only.
    shown = [("DIR" if os.path.isabs(arg) else arg) for arg in argv]
    return shlex.join(["python", "-m", "diagnostics.conformance_run", *shown])


def main(argv: Sequence[str] | None = None, progress: Callable[[str], None] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="filesystem for sources and the private tree (default: temp dir)")
    parser.add_argument("--corpus", action="append", help="corpus tree (repeatable; default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"evidence file (default: {RESULTS.name})")
    parser.add_argument("--table-from", type=Path, help="print the table from a kept evidence file and exit")
    args = parser.parse_args(argv)
    if args.table_from is not None:
        text = markdown_from_evidence(json.loads(args.table_from.read_text(encoding="utf-8")))
        print(text)
        write_table("conformance.md", "conformance", text)
        return 0
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    command = sanitized_command(raw_argv)
    reports = []
    for copier in copiers():
        if progress is not None:
            progress(copier.label)
        reports.append(check(copier, corpus=args.corpus, base=args.base, raise_if_none_ran=False))
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "tools": tool_versions(),
        "results": [report.to_json() for report in reports],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    text = markdown(reports, command)
    print(text)
    write_table("conformance.md", "conformance", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(progress=lambda label: print(f"running {label}", file=sys.stderr)))

"""``artifactkit conformance --copier CMD|module:func``: hold a copy step to the exact-metadata rules."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from artifactkit.cli.common import EXIT_CODES_HELP, EXIT_FAILED, EXIT_OK, describe, table
from artifactkit.cli.progress import activity
from artifactkit.cli.result import Result, command, failure, success
from artifactkit.conformance.checks import CHECKS, Report, check
from artifactkit.conformance.copiers import CopierError, resolve_copier
from artifactkit.conformance.corpus import corpus_names
from artifactkit.conformance.report import validated
from artifactkit.errors import ArtifactkitError


def register(subparsers: Any) -> None:
    """Add the ``conformance`` subcommand to the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "conformance", help="check that a copy tool or store preserves metadata exactly",
        epilog=EXIT_CODES_HELP,
        description="Copy every corpus tree with COPIER from a source where reads move atime into a "
                    "destination with the same atime behaviour, and check content, mode, special bits, "
                    "mtime_ns, atime_ns, directory and symlink times, owners, xattrs, hard links, holes and "
                    "inode flags, that exactness survives a later read, and that no field of the source was "
                    "changed. Exit 0 when every required check holds, 1 when one fails or no tree that ran "
                    "could exercise it, 2 on a setup or "
                    "usage error (also when the copier refused every tree).")
    parser.add_argument("--copier", required=True, metavar="CMD|module:func",
                        help="an argv template run without a shell, e.g. 'rsync -a --atimes {src}/ {dst}' "
                             "({dst} does not exist before the copy); a Python callable f(src, dst) as "
                             "module:function; or 'artifactkit' for this package's own store")
    parser.add_argument("--corpus", action="append", metavar="NAME",
                        help=f"a corpus tree (repeatable; default: all of {', '.join(corpus_names())})")
    parser.add_argument("--require", metavar="CHECKS", default=None,
                        help="comma-separated checks that decide the exit code (default: every check that "
                             "ran); a required check no tree that ran could exercise (null, with its reason) "
                             f"exits 1 too; checks: {', '.join(CHECKS)} (source_atime_untouched: the former "
                             "name of source_untouched)")
    parser.add_argument("--base", metavar="DIR",
                        help="where the source and the private destination tree are made (default: the "
                             "temp dir); reads must move atime there and FS_NOATIME_FL must work")
    parser.add_argument("--json", action="store_true",
                        help="print the artifactkit.conformance/1 JSON document instead of a table")
    parser.set_defaults(func=run)


def render(report: Report, require: tuple[str, ...]) -> str:
    """Rows = checks; the cell is pass/FAIL with the first failure's diagnosis, then where it was."""
    rows = []
    for item in report.checks:
        first = item.failures[0] if item.failures else None
        rows.append((
            item.check + ("" if item.check in require else " (not required)"),
            {True: "pass", None: f"not run ({item.reason})"}.get(item.passed, f"FAIL {item.diagnosis}"),
            str(len(item.failures)),
            f"{first.corpus}: {first.path}" if first else "",
        ))
    unrun = [item for item in report.checks if item.check in require and not item.ran]
    if report.failed & set(require):
        verdict = "a required check failed"
    elif unrun:
        verdict = "a required check did not run: " + "; ".join(f"{item.check} ({item.reason})" for item in unrun)
    else:
        verdict = "all required checks hold"
    if all(item.passed is None for item in report.checks):
        verdict = "no check ran here" + (f"; {verdict}" if unrun else "")
    not_run = [f"{name} ({why})" for name, why in report.not_run]
    return "\n".join([
        f"copier: {report.copier}",
        f"corpus: {', '.join(n for n in report.corpus if n not in dict(report.not_run)) or 'none run'}",
        *([f"not run: {', '.join(not_run)}"] if not_run else []),
        f"source: {report.environment['source_fs']}; destination: {report.environment['destination_fs']}, "
        f"isolation by {report.environment['isolation']}",
        "",
        table(rows, ("check", "result", "failures", "first failure")),
        "",
        verdict,
    ])


def _parse_require(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None  # every check that ran
    try:
        return validated(name.strip() for name in text.split(",") if name.strip())
    except ValueError as err:
        raise ValueError(f"--require: {err}") from err


def _parse_corpus(names: list[str] | None) -> list[str] | None:
    # Checked before anything is made: a typo must not cost a run over the trees before it.
    known = corpus_names()
    missing = [name for name in names or () if name not in known]
    if missing:
        raise ValueError(f"--corpus: no tree {', '.join(missing)}; trees: {', '.join(known)}")
    return names


def _setup_error(err: BaseException, args: argparse.Namespace, report: Report | None = None) -> Result:
    """An error that stopped the run. With a report (every tree was refused: nothing was checked, no verdict)
    the document is the report as far as it got with the ``artifactkit.error/1`` object as ``error``, as
    docs/conformance.md promises; else the error document alone."""
    result = failure(err, arguments={"--base": args.base})
    if report is None:
        return result
    return attrs.evolve(result, document={**report.to_json(), "error": result.document})


def _conformance(args: argparse.Namespace) -> Result:
    try:
        require = _parse_require(args.require)
        copier = resolve_copier(args.copier)
        corpus = _parse_corpus(args.corpus)
        with activity(f"conformance of {args.copier}", json_output=args.json) as update:
            report = check(copier, corpus=corpus, base=args.base, progress=lambda name: update(detail=name),
                           raise_if_none_ran=False)
    except (CopierError, ValueError, OSError, ArtifactkitError) as err:
        return _setup_error(err, args)
    if report.refusals and not report.checked:
        # The copier refused every tree it was given: nothing was checked, which is no verdict at all.
        return _setup_error(report.refusals[0], args, report)
    required = require if require is not None else tuple(item.check for item in report.checks if item.ran)
    doc = report.to_json()
    doc["required"] = list(required)
    # The whole story of each refusal for people (the table has one line), on stderr under --json too.
    return success(doc, render(report, required), exit_code=EXIT_OK if report.holds(required) else EXIT_FAILED,
                   messages=tuple(describe(refused) for refused in report.refusals))


#: The ``func`` of ``conformance``: its errors are results already; anything else goes on to ``main``.
run = command(_conformance)

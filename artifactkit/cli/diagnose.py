"""``artifactkit diagnose``: traced publish/download cycles under competing readers, with evidence.

With no arguments it runs 50 cycles on a private tree in the system temp dir, isolated the way the
strict fixture isolates (``--isolation auto``). Exit 0 when every check held, 1 on mismatches, 2
when setup or isolation is impossible (the message names the remedy).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, Final

from artifactkit.cli.common import EXIT_CODES_HELP, EXIT_FAILED, EXIT_OK, table
from artifactkit.cli.progress import activity
from artifactkit.cli.result import Result, command, failure, success
from artifactkit.errors import ArtifactkitError
from artifactkit.metadata.compare import FIELDS
from artifactkit.trace.attribution import ARROW, Accesses, AccessGroup
from artifactkit.trace.engine import COPIERS, ISOLATIONS, CycleProgress, DiagnoseConfig, DiagnoseResult, run_diagnose
from artifactkit.trace.evidence import to_evidence, write_evidence


def register(subparsers: Any) -> None:
    """Add the ``diagnose`` subcommand to the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diagnose", help="traced publish/download cycles under competing readers, with evidence",
        epilog=EXIT_CODES_HELP,
        description="Publish and download a corpus tree with historical ns times, CYCLES times, while "
                    "competing reader processes read every file and an inotify watcher (and fanotify, "
                    "with CAP_SYS_ADMIN) accounts for every access; check both stages against the "
                    "supplied values. Exit 0: all checks hold; 1: mismatches; 2: setup/isolation error.")
    parser.add_argument("--cycles", type=int, default=50, help="publish/download cycles, 2 checks each (default 50)")
    parser.add_argument("--interval-ms", type=int, default=1,
                        help="observation interval after each stage, in ms (default 1); every reader also "
                             "completes one full pass inside the window")
    parser.add_argument("--readers", type=int, default=4, help="competing reader processes (default 4)")
    parser.add_argument("--isolation", choices=ISOLATIONS, default="auto",
                        help="auto: FS_NOATIME_FL where reads move atime, nothing on a noatime mount; "
                             "flag: require the flag; none: control run that shows the drift (default auto)")
    parser.add_argument("--copier", choices=COPIERS, default="store",
                        help="store: artifactkit's Store; shutil: shutil.copy2 per file as a comparator")
    parser.add_argument("--corpus", default="basic", help="bundled corpus tree to cycle (default basic)")
    parser.add_argument("--base", metavar="DIR", default=None,
                        help="directory whose filesystem is diagnosed (default: the system temp dir)")
    parser.add_argument("--output", metavar="FILE", default=None,
                        help="write the sanitized artifactkit.diagnose/1 evidence to FILE")
    parser.add_argument("--json", action="store_true", help="print the artifactkit.diagnose/1 document")
    parser.set_defaults(func=run)


#: The summary fits a 100-column terminal; the long texts are whole in --json.
WIDTH: Final = 100
#: Groups of outside processes shown; the rest are counted in one row (all of them are in --json).
MAX_GROUP_ROWS: Final = 8
#: A group's label (its chain) is cut from the left beyond this, so the value column keeps its room.
GROUP_LABEL_WIDTH: Final = 40
_LOWER_BOUND: Final = ("lower bound: without fanotify (CAP_SYS_ADMIN) inotify counts events, "
                       "not who read")


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _fit_label(group: AccessGroup) -> str:
    """The group's chain, nearest ancestors kept: ``… → find → cat`` when the whole does not fit."""
    label = group.label
    if len(label) <= GROUP_LABEL_WIDTH:
        return label
    parts = [group.executable[:GROUP_LABEL_WIDTH - len("… → ")]]
    for name in reversed(group.chain):
        if len(ARROW.join(["…", name, *parts])) > GROUP_LABEL_WIDTH:
            break
        parts.insert(0, name)
    return ARROW.join(["…", *parts])


def group_rows(groups: Sequence[AccessGroup]) -> list[tuple[str, str]]:
    """One row per group of outside processes, at most MAX_GROUP_ROWS, then how many more."""
    rows = [(f"  {_fit_label(g)}", f"{_count(g.processes, 'process', 'processes')}, "
                                   f"{_count(g.events, 'event', 'events')}") for g in groups[:MAX_GROUP_ROWS]]
    if len(groups) > MAX_GROUP_ROWS:
        more = len(groups) - MAX_GROUP_ROWS
        rows.append(("  …", f"{_count(more, 'more group', 'more groups')} (--json)"))
    return rows


def render(result: DiagnoseResult, base: str | None = None) -> str:
    """The closing summary for people: one row per figure, units spelled out, at most WIDTH columns."""
    env, acc = result.environment, result.accesses
    rows: list[tuple[str, str]] = [
        ("base", base or f"{tempfile.gettempdir()} (the system temp dir)"),
        ("filesystem", f"{env.fs_type} ({env.atime_policy})"),
        ("isolation", f"{env.isolation_mode} (requested {env.isolation_requested})"),
        ("verified how", env.verified_how),
        ("copier", env.copier),
        ("engine", env.engine.describe()),
        ("cycles", f"{result.cycles_run} x {result.config.interval_ms} ms interval"),
        ("checks", f"{result.checks} ({result.failed_checks} failed): publish and download of each cycle"),
        ("checked fields", ", ".join(FIELDS)),
    ]
    by_diagnosis = result.by_diagnosis()
    rows += [(f"mismatches: {name}", str(count)) for name, count in sorted(by_diagnosis.items())]
    if not by_diagnosis:
        rows.append(("mismatches", "0"))
    rows += [
        ("source atime moved", "yes" if result.source_atime_moved else "no"),
        ("competing reads", f"{result.competing_reads} by {env.readers} reader(s)"),
        ("inotify events", f"{sum(result.inotify.as_dict().values())} ({result.inotify.overflows} overflows)"),
        ("accesses: self", str(acc.self_accesses)),
        ("accesses: readers", str(acc.reader_accesses)),
        ("accesses: unexplained", _unexplained(acc)),
        *group_rows(acc.groups),
        ("attribution", _attribution(acc, env.fanotify)),
    ]
    rows.append(("duration", f"{result.duration_ns // 1_000_000} ms"))
    verdict = "all checks hold" if result.ok else f"{result.failed_checks} check(s) failed"
    room = WIDTH - 2 - max(len(label) for label, _ in [*rows, ("figure", "")])
    fitted = [(label, value if len(value) <= room else value[:room - 15] + " ... (--json)") for label, value in rows]
    return table(fitted, ("figure", "value")) + f"\n\ndiagnose: {verdict}"


def _unexplained(acc: Accesses) -> str:
    if acc.method != "fanotify":
        return f"{acc.unexplained} ({_LOWER_BOUND})"
    groups = acc.groups
    return (f"{_count(acc.unexplained, 'event', 'events')} by "
            f"{_count(len(acc.attributed), 'outside process', 'outside processes')}"
            + (f" in {_count(len(groups), 'group', 'groups')}:" if groups else ""))


def _attribution(acc: Accesses, status: str) -> str:
    hold = acc.hold
    if acc.method != "fanotify" or hold is None or hold.mode != "permission":
        return f"{acc.method}; {status}"
    # The whole status (what is marked, FAN_OPEN_PERM) is in --json; this row says what it cost.
    return f"fanotify, held until named: {hold.named_while_held} waited, max {hold.hold_us_max / 1000:.1f} ms"


def printable(text: str, encoding: str | None) -> str:
    """``text``, or with ASCII arrows and dots where the terminal's encoding has no → or …."""
    try:
        text.encode(encoding or "utf-8")
    except UnicodeEncodeError:
        return text.replace("→", "->").replace("…", "...")
    return text


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _exit_on_sigterm() -> Any:
    """Make SIGTERM unwind like Ctrl-C does, so readers are reaped and the work tree removed."""
    try:
        return signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        return None


def _diagnose(args: argparse.Namespace) -> Result:
    try:
        config = DiagnoseConfig(cycles=args.cycles, interval_ms=args.interval_ms, readers=args.readers,
                                isolation=args.isolation, copier=args.copier, base=args.base, corpus=args.corpus)
    except ValueError as err:  # a value it refuses (--cycles 0): a usage error
        return failure(err)
    previous = _exit_on_sigterm()
    try:
        with activity("diagnose", json_output=args.json, total=args.cycles, unit="cycles") as update:
            def progress(step: CycleProgress) -> None:
                update(completed=step.cycle, detail=f"mismatches {step.mismatches}  reads {step.reads}")
            result = run_diagnose(config, progress=progress)
    except (OSError, ArtifactkitError) as err:
        return failure(err, prefix="diagnose cannot run: ", arguments={"--base": args.base})
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    doc = to_evidence(result)
    if args.output:
        try:
            write_evidence(doc, args.output)
        except (OSError, ValueError) as err:
            return failure(err, prefix="cannot write evidence: ", arguments={"--output": args.output})
    return success(doc, printable(render(result, args.base), sys.stdout.encoding),
                   exit_code=EXIT_OK if result.ok else EXIT_FAILED)


#: The ``func`` of ``diagnose``: its errors are results already; anything else goes on to ``main``.
run = command(_diagnose)

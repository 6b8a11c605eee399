"""``artifactkit probe [DIR] [--json]``: what a filesystem does to atime, found by experiment."""

from __future__ import annotations

import argparse
from typing import Any

from artifactkit.cli.common import EXIT_CODES_HELP, table
from artifactkit.cli.result import Result, command, success
from artifactkit.errors import ArtifactkitError
from artifactkit.isolation.client_cache import UNVERIFIED
from artifactkit.isolation.probe import AtimeProbe, isolation_choice, probe_atime


def register(subparsers: Any) -> None:
    """Add the ``probe`` subcommand to the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "probe", help="find out by experiment what a directory's filesystem does to atime",
        epilog=EXIT_CODES_HELP,
        description="Probe DIR's filesystem with scratch files (removed afterwards): whether reads move "
                    "historical and future atimes, FS_NOATIME_FL support, inheritance and effect, "
                    "timestamp granularity and range. Exit 0, or 2 on a setup error.")
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="a writable directory on the filesystem to probe (default: .)")
    parser.add_argument("--json", action="store_true", help="print the artifactkit.probe/1 JSON document")
    parser.set_defaults(func=run)


def render(probe: AtimeProbe) -> str:
    """The human summary: one row per finding, units spelled out."""
    doc = probe.to_json()
    doc["granularity_ns"] = f"{probe.granularity_ns} ns"
    doc["time_range"] = str(probe.time_range or UNVERIFIED)
    # A value a client cache may have faked is not shown as a finding; "no read moved atime" is the policy's ground.
    for key in probe.unverified:
        doc[key] = UNVERIFIED
    if "atime_policy" in probe.unverified:
        doc["reads_move_historical_atime"] = doc["reads_move_future_atime"] = UNVERIFIED
    rows = [(key, _show(doc[key])) for key in (
        "fs_type", "mount_options", "atime_policy", "reads_move_historical_atime", "reads_move_future_atime",
        "noatime_flag", "flag_inherited", "flag_effective", "granularity_ns", "pre_1970_ok", "post_2038_ok",
        "time_range", "client_cache")]
    return table(rows, ("finding", "value")) + f"\n\nnoatime_tree here would use: {isolation_choice(probe)}"


def _show(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _probe(args: argparse.Namespace) -> Result:
    probe = probe_atime(args.directory)
    return success(probe.to_json(), render(probe))


#: The ``func`` of ``probe``: a filesystem it cannot probe is a setup error (exit 2), named.
run = command(_probe, OSError, ArtifactkitError, prefix="cannot probe: ", arguments=lambda a: {"DIR": a.directory})

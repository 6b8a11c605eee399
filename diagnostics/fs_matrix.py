"""Run the real filesystem matrix once and keep the evidence (root only).

Builds every filesystem of ``tests/support/fs_matrix.MATRIX`` on loop images in /dev/shm, and on each
runs the probe, the strict fixture, a store round trip of every bundled corpus tree, a clamp
experiment and the extended-metadata probes below (user/trusted xattrs, ACLs, ``SEEK_HOLE``, settable
flags); compares each with what the kernel sources say the filesystem is; writes
``diagnostics/results/fs-matrix.json`` (sanitized: no absolute paths, user or host names) and
prints the "Filesystem support" and "Extended metadata" tables in docs/filesystems.md. Everything is
unmounted and detached at the end.

    sudo python -m diagnostics.fs_matrix                 # from the repository root: run, write the JSON, the table
    python -m diagnostics.fs_matrix --table-from diagnostics/results/fs-matrix.json

What a filesystem takes beyond modes and times is found by experiment: each probe tries the real operation on
a fresh file and records ``yes`` or the errno name the kernel answered, never a guess from the filesystem's name:
set ``user.x`` and ``trusted.x``, a POSIX access ACL, write a file with a hole and look for it with
``SEEK_HOLE``, and set each restorable inode flag (``chattr`` S and d on a file, D on a directory) and read it
back.
"""

from __future__ import annotations

import argparse
import datetime
import errno
import fcntl
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from artifactkit.conformance.corpus import corpus_names
from artifactkit.errors import ArtifactkitError
from artifactkit.isolation.probe import probe_atime
from artifactkit.metadata.extended import data_extents
from artifactkit.metadata.flags import FLAG_LETTERS, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, InodeFlag
from artifactkit.metadata.render import acl_bytes
from diagnostics.docs_tables import write_table
from tests.support.fs_matrix import MATRIX, NS_PER_S, FsSpec, build, fixture_outcome, round_trip
from tests.support.mounts import Mounts

REPO: Final = Path(__file__).resolve().parent.parent

SCHEMA: Final = "artifactkit.fs-matrix/1"
COMMAND: Final = "sudo python -m diagnostics.fs_matrix"
DEFAULT_OUTPUT: Final = REPO / "diagnostics" / "results" / "fs-matrix.json"
EXIT_OK, EXIT_DIFFERS, EXIT_SETUP = 0, 1, 2
#: Far enough out that any filesystem with a bounded range clamps it (and 64-bit ones keep it).
FAR_S: Final = 2**62

#: The keys of a features row, in table order.
FEATURES: Final = ("user_xattr", "trusted_xattr", "acl", "seek_hole", "flags")
_ACL: Final = "u::rw-,u:1234:r--,g::r--,m::r--,o::---"
_HOLE_AT: Final = 1 << 20
_INT: Final = struct.Struct("=i")
#: (flag, on a directory?) for each flag a download restores.
_RESTORABLE: Final = ((InodeFlag.FS_SYNC_FL, False), (InodeFlag.FS_NODUMP_FL, False),
                      (InodeFlag.FS_DIRSYNC_FL, True))


def _outcome(step: Callable[[], object]) -> str:
    try:
        step()
    except OSError as err:
        return errno.errorcode.get(err.errno or 0, str(err.errno))
    return "yes"


def _seek_hole(path: Path) -> str:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, 4 * _HOLE_AT)
        os.pwrite(fd, b"x" * 4096, _HOLE_AT)
        os.fsync(fd)  # xfs and btrfs report delayed-allocation data as data only once it is allocated
        runs = data_extents(fd, 4 * _HOLE_AT)
    finally:
        os.close(fd)
    return "yes" if runs else "no (whole file reads as data)"


def _settable_flags(directory: Path) -> str:
    """The letters of the restorable flags this filesystem keeps, then each refused one with its errno."""
    kept, refused = [], []
    for flag, on_dir in _RESTORABLE:
        path = directory / f"flag-{int(flag):x}"
        if on_dir:
            path.mkdir()
        else:
            path.write_bytes(b"")
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            # The whole word, unknown bits included: ext4's EXTENTS bit must not be cleared on the way.
            current = _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, _INT.pack(0)))[0]
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, _INT.pack(current | int(flag)))
            after = _INT.unpack(fcntl.ioctl(fd, FS_IOC_GETFLAGS, _INT.pack(0)))[0]
            if after & flag:
                kept.append(FLAG_LETTERS[flag])
                fcntl.ioctl(fd, FS_IOC_SETFLAGS, _INT.pack(after & ~int(flag)))
            else:
                refused.append(f"{FLAG_LETTERS[flag]}: not kept")
        except OSError as err:
            refused.append(f"{FLAG_LETTERS[flag]}: {errno.errorcode.get(err.errno or 0, str(err.errno))}")
        finally:
            os.close(fd)
        if on_dir:
            path.rmdir()
        else:
            path.unlink()
    shown = " ".join(kept) or "none"
    return shown + (f" ({', '.join(refused)})" if refused else "")


def probe_features(directory: Path) -> dict[str, str]:
    """One row of the extended-metadata table for the filesystem holding ``directory``."""
    path = directory / "features"
    path.write_bytes(b"")
    try:
        found = {
            "user_xattr": _outcome(lambda: os.setxattr(path, "user.x", b"1")),
            "trusted_xattr": _outcome(lambda: os.setxattr(path, "trusted.x", b"1")),
            "acl": _outcome(lambda: os.setxattr(path, "system.posix_acl_access", acl_bytes(_ACL))),
        }
    finally:
        path.unlink()
    found["seek_hole"] = _seek_hole(directory / "sparse")
    (directory / "sparse").unlink()
    found["flags"] = _settable_flags(directory)
    return found


def _sanitize_options(options: list[str]) -> list[str]:
    # overlay lists lowerdir=/abs/path...: evidence must not carry paths of the machine it ran on.
    return [f"{opt.split('=', 1)[0]}=<path>" if "/" in opt else opt for opt in options]


def _tool_version(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "missing"
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).strip().splitlines()[0]


def environment() -> dict[str, Any]:
    inherit = Path("/proc/sys/fs/xfs/inherit_noatime")
    return {
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mkfs.ext4": _tool_version(["mkfs.ext4", "-V"]),
        "mkfs.xfs": _tool_version(["mkfs.xfs", "-V"]),
        "mkfs.btrfs": _tool_version(["mkfs.btrfs", "--version"]),
        "fs.xfs.inherit_noatime": inherit.read_text().strip() if inherit.exists() else None,
    }


def clamp_range(directory: Path) -> list[int] | None:
    """The seconds range the kernel clamps to, found by setting far-out values; None if it kept them."""
    path = directory / "clamp"
    path.write_bytes(b"")
    edges = []
    for value in (-FAR_S, FAR_S):
        os.utime(path, ns=(value * NS_PER_S, value * NS_PER_S))
        edges.append(os.lstat(path).st_mtime_ns // NS_PER_S)
    path.unlink()
    return None if edges == [-FAR_S, FAR_S] else edges


def run_one(spec: FsSpec, mounts: Mounts, fallback: Path) -> dict[str, Any]:
    base = build(spec, mounts)
    started = time.monotonic()
    probe = probe_atime(base).to_json()
    probe["mount_options"] = _sanitize_options(probe["mount_options"])
    expected = spec.expected_probe()
    trips: dict[str, str] = {}
    for corpus in corpus_names():
        work = Path(tempfile.mkdtemp(prefix="work-", dir=base))
        try:
            trips[corpus] = round_trip(corpus, work, fallback)
        except (ArtifactkitError, AssertionError, OSError) as err:
            trips[corpus] = type(err).__name__  # the class only: messages carry machine paths
        finally:
            shutil.rmtree(work)
    clamp = clamp_range(base)
    probe_dir = Path(tempfile.mkdtemp(prefix="features-", dir=base))
    try:
        features = probe_features(probe_dir)
    finally:
        shutil.rmtree(probe_dir)
    row = {
        "name": spec.name, "fs_type": spec.fs_type, "made_with": spec.made_with, "evidence": spec.evidence,
        "probe": probe,
        "probe_differs": sorted(k for k, v in expected.items() if probe[k] != v),
        "fixture": fixture_outcome(base), "fixture_expected": spec.fixture,
        "round_trip": trips,
        "round_trip_expected": {corpus: spec.round_trip_outcome(corpus) for corpus in trips},
        "clamped_to_s": clamp, "clamped_to_s_expected": list(spec.range_s) if spec.range_s else None,
        "features": features, "features_differ": features_differ(spec, features),
        "seconds": round(time.monotonic() - started, 2),
    }
    row["as_expected"] = (not row["probe_differs"] and row["fixture"] == spec.fixture
                          and trips == row["round_trip_expected"] and clamp == row["clamped_to_s_expected"]
                          and not row["features_differ"])
    return row


def features_differ(spec: FsSpec, features: dict[str, str]) -> list[str]:
    """The probes that contradict the matrix's own row (its ``xattrs`` and ``flag`` columns)."""
    differ = [key for key in ("user_xattr", "acl") if (features[key] == "yes") != spec.xattrs]
    if (features["flags"].startswith("none")) != (spec.flag == "unsupported"):
        differ.append("flags")
    return differ


def run_matrix() -> dict[str, Any]:
    started = time.monotonic()
    with Mounts() as mounts:
        fallback = mounts.tmpfs("relatime")
        rows = [run_one(spec, mounts, fallback) for spec in MATRIX]
    return {
        "schema": SCHEMA, "command": COMMAND, "environment": environment(),
        "corpus": corpus_names(), "filesystems": rows,
        "all_as_expected": all(row["as_expected"] for row in rows),
        "seconds": round(time.monotonic() - started, 2),
    }


def _year(seconds: int) -> str:
    return str((datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=seconds)).date())


def _yes(value: object) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def _round_trips(trips: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for outcome in trips.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    words = {"exact": "exact", "TimestampNotRepresentable": "refused (TimestampNotRepresentable)",
             "NotRestorableError": "refused (NotRestorableError)"}
    return ", ".join(f"{words.get(k, k)} {n}/{len(trips)}" for k, n in sorted(counts.items()))


def table(doc: dict[str, Any]) -> str:
    """The README's "Filesystem support" table, from a fs-matrix document."""
    head = ("Filesystem", "Made with", "atime policy (probed)", "FS_NOATIME_FL", "Inherited", "Effective",
            "Granularity", "Time range", "Strict fixture", "Corpus round trip", "As kernel sources say")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in doc["filesystems"]:
        probe = row["probe"]
        gran = probe["granularity_ns"]
        clamp = row["clamped_to_s"]
        fixture = row["fixture"].replace("IsolationError:", "IsolationError (") + (
            ")" if row["fixture"].startswith("IsolationError") else "")
        cells = (
            row["name"], row["made_with"], probe["atime_policy"], probe["noatime_flag"],
            _yes(probe["flag_inherited"]), _yes(probe["flag_effective"]),
            "1 s" if gran == NS_PER_S else f"{gran} ns",
            "64-bit seconds" if clamp is None else f"{_year(clamp[0])} .. {_year(clamp[1])}",
            fixture, _round_trips(row["round_trip"]),
            "yes" if row["as_expected"] else "NO: " + ", ".join(row["probe_differs"] or ["see JSON"]),
        )
        lines.append("| " + " | ".join(cells) + " |")
    env = doc["environment"]
    lines += ["", f"Linux {env['kernel']}, {env['mkfs.ext4']}, {env['mkfs.xfs']}, {env['mkfs.btrfs']}; "
                  f"corpus trees: {', '.join(doc['corpus'])}. Regenerate: `{doc['command']}`."]
    return "\n".join(lines)


def features_table(doc: dict[str, Any]) -> str:
    """The "Extended metadata" table: what each filesystem took when the probes tried it."""
    head = ("Filesystem", "`user.*` xattr", "`trusted.*` xattr", "POSIX ACL", "`SEEK_HOLE`",
            "Settable flags (S d D)", "Trees not restored exactly")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in doc["filesystems"]:
        features = row.get("features") or {}
        trips = row["round_trip"]
        odd_trips = {tree: outcome for tree, outcome in trips.items() if outcome != "exact"}
        odd = ", ".join(f"{tree}: {outcome}" for tree, outcome in odd_trips.items())
        if len(set(odd_trips.values())) == 1 and len(odd_trips) > len(trips) - len(odd_trips):
            # Most trees failing one way reads best as its exceptions (ext4 -I 128 keeps only time-range).
            exact = [tree for tree in trips if tree not in odd_trips]
            which = f"all but {', '.join(exact)}" if exact else f"all {len(trips)}"
            odd = f"{which}: {next(iter(odd_trips.values()))}"
        cells = [row["name"], *(features.get(key, "not probed") for key in FEATURES), odd or "none"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Each cell is `yes` or the errno the kernel answered when the operation was tried on a fresh file "
                  f"(as root). Regenerate: `{doc['command']}`."]
    return "\n".join(lines)


def write_tables(doc: dict[str, Any]) -> None:
    print(table(doc))
    write_table("filesystems.md", "fs-matrix", table(doc))
    print(features_table(doc))
    write_table("filesystems.md", "fs-features", features_table(doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the JSON evidence")
    parser.add_argument("--table-from", type=Path, metavar="FILE", help="only re-print the table of a saved run")
    args = parser.parse_args(argv)
    if args.table_from is not None:
        write_tables(json.loads(args.table_from.read_text(encoding="utf-8")))
        return EXIT_OK
    if os.geteuid() != 0:
        print("fs_matrix: needs root to mount test filesystems", file=sys.stderr)
        return EXIT_SETUP
    doc = run_matrix()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    write_tables(doc)
    return EXIT_OK if doc["all_as_expected"] else EXIT_DIFFERS


if __name__ == "__main__":
    sys.exit(main())

"""``publish``, ``download``, ``diff``, ``verify``, ``gc``, ``forget`` and ``ls``: thin shells over :class:`Store`."""

from __future__ import annotations

import argparse
import gc
import re
import warnings
from collections.abc import Callable
from typing import Any

import attrs

from artifactkit.cli.common import EXIT_CODES_HELP, EXIT_FAILED, EXIT_OK, human_bytes, one_line, table
from artifactkit.cli.progress import store_activity
from artifactkit.cli.result import Result, command, success
from artifactkit.errors import (
    ArtifactkitError,
    ReownedWarning,
    RepairedBlobsWarning,
    SourceAtimesMovedWarning,
    UnreadableManifestWarning,
)
from artifactkit.metadata.mismatch import PRESENCE
from artifactkit.store.layout import parse_ref
from artifactkit.store.source_atimes import moved_of
from artifactkit.store.store import Store

#: ``--grace``: whole seconds, minutes, hours or days (``0``, ``90s``, ``10m``, ``1h``, ``2d``; a bare number is s).
_DURATION = re.compile(r"([0-9]+)([smhd]?)", re.ASCII)
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str,
            description: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=summary, description=description, epilog=EXIT_CODES_HELP)
    parser.add_argument("--store", required=True, metavar="STORE",
                        help="the store: a local path or s3://bucket/prefix; publish creates a local store "
                             "(and its parents) only where nothing is, or in an empty directory")
    parser.add_argument("--json", action="store_true", help=f"print one artifactkit.{name}/1 JSON document")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _duration(text: str) -> float:
    match = _DURATION.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is no duration: give 0, or whole seconds, minutes, hours or days "
                                         "(90s, 10m, 1h, 2d)")
    return float(int(match[1]) * _UNIT_S[match[2]])


def duration_text(seconds: float) -> str:
    """``3600`` -> ``1h``, ``5400`` -> ``1h30m``, ``42`` -> ``42s``: a grace or a wait, as ``--grace`` takes it."""
    left, parts = round(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0"


def _workers_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--workers", type=_positive, default=None, metavar="N",
                        help=f"threads of the native core that {what}; default: the CPUs this process may "
                             "use. The reference engine (ARTIFACTKIT_ENGINE=python, or where the core is not "
                             "built) accepts N and ignores it: it is one process by design. Every check is "
                             "the same; `artifactkit --version` says which engine runs")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(subparsers, "publish", "publish a directory tree as the next version of NAME",
                "Capture SRC (lstat before any read), store its content by sha256 and its metadata in a "
                "manifest, and make the new version visible only once everything is durable.")
    p.add_argument("src", metavar="SRC", help="the directory tree to publish")
    p.add_argument("--name", required=True, help="artifact name; each publish adds version 1, 2, ...")
    p.add_argument("--stat-cache", action="store_true",
                   help="skip reading files whose inode, size, mtime and ctime match the store's stat cache "
                        "(entries changed within 2 s of the publish that recorded them are hashed again); "
                        "default: hash every byte")
    p.add_argument("--links", choices=("as-is", "contained"), default="as-is",
                   help="as-is (default): record every symlink with its target as it is, also one leaving the "
                        "tree (a download recreates the link and never follows it); contained: refuse (exit 2) "
                        "a tree with links that may resolve outside it, listing all of them")
    _workers_option(p, "read and stage files")
    p.set_defaults(func=_store_command(_publish))

    p = _parser(subparsers, "download", "download NAME[@VERSION] into DEST (which must not exist)",
                "Restore a version with exact modes, owners, xattrs and ACLs, hard links, holes, inode flags "
                "and nanosecond mtime/atime, verify every digest and every value by reading it back, then "
                "make DEST appear in one rename.")
    p.add_argument("ref", metavar="NAME[@VERSION]", help="artifact name, latest version unless @VERSION (1, 2, ...)")
    p.add_argument("dest", metavar="DEST", help="destination directory; must not exist")
    p.add_argument("--owners", choices=("exact", "current"), default="exact",
                   help="exact (default): restore every owner, refuse (exit 2) where this user cannot; current: "
                        "take your own ownership and clear setuid/setgid and privileged xattrs of re-owned entries")
    p.add_argument("--path", dest="paths", action="append", default=None, metavar="SUB",
                   help="only SUB (a path in the version: a directory with everything under it, or one entry) and the "
                        "directories on the way to it, each as recorded; repeat for more. Of a format-3 version only "
                        "the tree objects on the way are read. A path the version lacks: exit 2")
    _workers_option(p, "create and restore files")
    p.set_defaults(func=_store_command(_download))

    p = _parser(subparsers, "diff", "what changed between two versions: entries added, removed and changed",
                "List every entry added, removed or changed from NAME@V1 to NAME@V2 (or another artifact's version), "
                "each changed field with both values and the diagnosis the shared assertion gives; only the "
                "directories whose tree objects differ are read. Exit 0 whether or not they differ.")
    p.add_argument("a", metavar="NAME@V1", help="the version to compare from")
    p.add_argument("b", metavar="NAME@V2", help="the version to compare to")
    p.set_defaults(func=_store_command(_diff))

    p = _parser(subparsers, "verify", "check every manifest and blob (read-only); exit 1 on findings",
                "Hash every manifest and every blob it needs, and list corrupt, missing, unreadable and "
                "orphaned items; nothing is changed.")
    p.set_defaults(func=_store_command(_verify))

    p = _parser(subparsers, "gc", "remove what no version needs: unreferenced blobs, abandoned staging",
                "Under the store's exclusive lock (publishers wait), remove every blob no readable manifest "
                "references and every staging leftover of an interrupted publish, and report the bytes freed "
                "(blocks allocated to what was removed). An unreadable manifest stops the sweep (exit 1).")
    p.add_argument("--dry-run", action="store_true", help="report what would be removed and freed; remove nothing")
    p.add_argument("--grace", type=_duration, default=None, metavar="DURATION",
                   help="keep leftovers younger than this (0, 90s, 10m, 1h, 2d), reported as kept; default: 0 for "
                        "a local store (its lock proves no publisher runs), 1h for a bucket (a publisher stalled "
                        "past its lease); 0 removes every leftover no running operation holds")
    p.set_defaults(func=_store_command(_gc))

    p = _parser(subparsers, "forget", "remove versions from the store's list; gc then frees what only they used",
                "Remove each NAME@VERSION, or with --keep-last N all but the newest N versions of each NAME, from "
                "the store's list: each in one removal of its manifest, all or none. A missing name or version, "
                "or a version a running download holds, removes nothing (exit 2). A name's forgotten newest "
                "version number is never given to a later publish. Run gc afterwards to free the space.")
    p.add_argument("refs", nargs="+", metavar="NAME[@VERSION]",
                   help="NAME@VERSION to forget that version; NAME (with --keep-last) for all but its newest")
    p.add_argument("--keep-last", type=_positive, default=None, metavar="N",
                   help="forget all but the newest N versions of each NAME (N >= 1: forgetting every version "
                        "takes naming each)")
    p.add_argument("--dry-run", action="store_true", help="say which versions would go; remove nothing")
    p.set_defaults(func=_store_command(_forget))

    p = _parser(subparsers, "ls", "list published versions",
                "List every visible version: name, version and manifest sha256 (no manifest is read).")
    p.set_defaults(func=_store_command(_ls))


def _ref_doc(ref: Any) -> dict[str, Any]:
    return {"name": ref.name, "version": ref.version, "digest": ref.digest}


def _store_command(build: Callable[[argparse.Namespace], Result]) -> Callable[[argparse.Namespace], int]:
    # A failed check (integrity, mismatch) is exit 1; bad input or environment is exit 2 (EXIT_CODES). Anything
    # else goes on to main, the last line of defence.
    return command(_without_cyclic_gc(build), ArtifactkitError, OSError, LookupError, ValueError, NotImplementedError,
                   arguments=lambda a: {"source": getattr(a, "src", None), "destination": getattr(a, "dest", None),
                                        "--store": a.store})


def _without_cyclic_gc(build: Callable[[argparse.Namespace], Result]) -> Callable[[argparse.Namespace], Result]:
    """``build`` with Python's cyclic garbage collector off, and back on after.

    This process runs one store operation and exits. What the operation accumulates — a ``FileMeta`` per entry,
    tuples of ``str`` and ``int`` — holds no reference cycles, yet every full collection while it grows traverses
    all of it (a study measured what that costs: docs/performance.md has the figures).
    Reference counting still frees everything as before; only cycles would wait for the process's exit. The
    library itself never touches the collector: its callers own their process.
    """
    def run(a: argparse.Namespace) -> Result:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return build(a)
        finally:
            if was_enabled:
                gc.enable()
    return run


def _publish(a: argparse.Namespace) -> Result:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RepairedBlobsWarning)
        warnings.simplefilter("always", SourceAtimesMovedWarning)
        with store_activity(f"publishing {a.name}", json_output=a.json) as progress:
            store = Store(a.store)
            ref = store.publish(a.src, a.name, stat_cache=a.stat_cache, workers=a.workers, links=a.links,
                                progress=progress)
    warned = [w.message for w in caught if issubclass(w.category, RepairedBlobsWarning)]
    # Every damaged blob the publish stored its bytes over, as data; the warning's message is the note for people.
    repaired = sorted(sha for message in warned for sha in vars(message).get("blobs", []))
    notes = "".join(f"\nnote: {message}" for message in warned)
    moved = moved_of(w.message for w in caught)
    return success({"schema": "artifactkit.publish/1", "repaired_blobs": repaired, "retries": store.backend.retries,
                    "source_atimes_moved": moved.as_json(), **_ref_doc(ref)},
                   f"published {ref} (manifest sha256 {ref.digest}); {moved.describe()}{notes}")


def _download(a: argparse.Namespace) -> Result:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReownedWarning)
        with store_activity(f"downloading {a.ref}", json_output=a.json) as progress:
            store = Store(a.store)
            ref = store.download(a.ref, a.dest, owners=a.owners, workers=a.workers, progress=progress,
                                 paths=a.paths)
    warned = [w.message for w in caught if issubclass(w.category, ReownedWarning)]
    # Every changed entry as data ("path (what changed)"); the warnings' messages are summaries for people.
    # reowned_entries: the same list under the name docs/store.md gave it first.
    entries = [entry for message in warned for entry in vars(message).get("entries", [])]
    notes = "".join(f"\nnote: {message}" for message in warned)
    unverified = list(ref.unverified)
    # Times read back as set, perhaps from a client's cache nothing could look past: named, never called exact.
    verified = ("every entry verified exact (mode, owner, xattrs, links, holes, flags, mtime_ns, atime_ns)"
                if not unverified else "every entry verified exact (mode, owner, xattrs, links, holes, flags) but "
                f"{', '.join(unverified)}: unverified (client-cached attributes; they read back as set, perhaps "
                "from a cache this filesystem's client keeps)")
    return success({"schema": "artifactkit.download/1", "dest_verified": not unverified, "unverified": unverified,
                    "reowned": entries, "reowned_entries": entries, "retries": store.backend.retries,
                    **_ref_doc(ref)},
                   f"downloaded {ref} into {a.dest}: {verified}{notes}")


def _diff(a: argparse.Namespace) -> Result:
    store = Store(a.store)
    changes = store.diff(a.a, a.b)
    added = [m.path for m in changes if m.field == PRESENCE and m.expected is None]
    removed = [m.path for m in changes if m.field == PRESENCE and m.actual is None]
    changed = [m for m in changes if m.field != PRESENCE]
    lines = [f"added    {path}" for path in added] + [f"removed  {path}" for path in removed]
    lines += [f"changed  {m.path}: {m.describe()}" for m in changed]
    summary = (f"{a.a} -> {a.b}: {len(added)} added, {len(removed)} removed, "
               f"{len({m.path for m in changed})} changed")
    return success({"schema": "artifactkit.diff/1", "a": a.a, "b": a.b, "added": added, "removed": removed,
                    "changed": [{"path": m.path, "field": m.field, "a": m.expected, "b": m.actual,
                                 "delta_ns": m.delta_ns, "diagnosis": m.diagnosis} for m in changed]},
                   "\n".join([*lines, summary]))


def _verify(a: argparse.Namespace) -> Result:
    with store_activity("verifying", json_output=a.json) as progress:
        store = Store(a.store)
        report = store.verify(progress=progress)
    rows = [(kind, str(len(items)), "; ".join(items[:3]) + (" ..." if len(items) > 3 else ""))
            for kind, items in (("corrupt", report.corrupt), ("missing", report.missing),
                                ("unreadable", report.unreadable), ("orphaned", report.orphaned),
                                ("in progress", report.in_progress))]
    rows.append(("kept", str(len(report.kept)), "; ".join(report.kept[:3]) + (" ..." if len(report.kept) > 3 else "")))
    leftovers = f"ok, with leftovers: `artifactkit gc --store {a.store}` removes them"
    verdict = "clean" if report.clean else (leftovers if report.ok else "NOT OK")
    if report.kept and report.ok:
        verdict += (f"; {len(report.kept)} leftover(s) younger than gc's grace of {duration_text(report.grace_s)} "
                    f"are kept for now (`artifactkit gc --store {a.store} --grace 0` removes them once no "
                    "operation holds them)")
    broken = (f"\nversions that do not download exactly: {', '.join(report.broken_versions)}; a publish of their "
              "content stores damaged blobs again" if report.broken_versions else "")
    return success({"schema": "artifactkit.verify/1", "clean": report.clean, "retries": store.backend.retries,
                    **attrs.asdict(report)},
                   f"{table(rows, ('finding', 'count', 'items'))}\n\n"
                   f"{report.versions} version(s), {report.blobs_checked} blob(s) hashed: {verdict}{broken}",
                   exit_code=EXIT_OK if report.clean else EXIT_FAILED)


def _gc(a: argparse.Namespace) -> Result:
    with store_activity("gc", json_output=a.json) as progress:
        store = Store(a.store)
        report = store.gc(grace_s=a.grace, dry_run=a.dry_run, progress=progress)
    blobs, staging = len(report.removed_blobs), len(report.removed_staging)
    kept_blobs, kept_staging = len(report.kept_blobs), len(report.kept_staging)
    if not (blobs or staging):
        text = f"{'would remove' if a.dry_run else 'removed'} nothing" + ("" if kept_blobs or kept_staging
                                                                         else f": no leftovers in {a.store}")
    elif a.dry_run:
        text = (f"would remove {blobs} blob(s) and {staging} staging leftover(s), "
                f"freeing {human_bytes(report.freed_bytes)} (dry run: nothing removed)")
    else:
        text = (f"removed {blobs} blob(s) and {staging} staging leftover(s), "
                f"freed {human_bytes(report.freed_bytes)}")
    if kept_blobs or kept_staging:
        text += (f"; kept {kept_blobs} blob(s) and {kept_staging} staging leftover(s) "
                 f"({human_bytes(report.kept_bytes)}) younger than the grace of {duration_text(report.grace_s)}: "
                 f"all are old enough in {duration_text(report.kept_wait_s)}, or `--grace 0` removes them now "
                 "(what a running operation holds is never removed)")
    return success({"schema": "artifactkit.gc/1", "retries": store.backend.retries, **attrs.asdict(report)}, text)


def _forget(a: argparse.Namespace) -> Result:
    wanted: dict[str, list[int] | None] = {}
    for text in a.refs:
        name, version = parse_ref(text)
        versions = wanted.setdefault(name, None if version is None else [])
        if (version is None) != (versions is None):
            raise ValueError(f"{name!r} is named both bare and with a version: give one or the other")
        if versions is not None and version is not None:
            versions.append(version)
    refs = Store(a.store).forget_many(wanted, keep_last=a.keep_last, dry_run=a.dry_run)
    named = ", ".join(map(str, refs))
    if not refs:
        text = "forgot nothing: every named artifact has no more than --keep-last versions"
    elif a.dry_run:
        text = f"would forget {len(refs)} version(s): {named} (dry run: nothing removed)"
    else:
        text = (f"forgot {len(refs)} version(s): {named}; `artifactkit gc --store {a.store}` frees what only "
                "they used")
    return success({"schema": "artifactkit.forget/1", "dry_run": a.dry_run, "keep_last": a.keep_last,
                    "forgotten": [_ref_doc(ref) for ref in refs]}, text)


def _ls(a: argparse.Namespace) -> Result:
    # A version left out (its manifest unreadable) is the library's warning; here it is said as ours: one
    # line each after the table, and data under --json, never Python's "file:line: Warning" and source line.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnreadableManifestWarning)
        refs = Store(a.store).list()
    left = sorted((w.message for w in caught if isinstance(w.message, UnreadableManifestWarning)),
                  key=lambda m: (m.name, m.version))
    for other in caught:  # any other warning is shown as it would have been
        if not isinstance(other.message, UnreadableManifestWarning):
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    notes = "".join(f"\nnote: {one_line(str(message))}" for message in left)
    return success({"schema": "artifactkit.ls/1", "versions": [_ref_doc(r) for r in refs],
                    "unreadable": [{"name": m.name, "version": m.version, "path": m.path, "reason": m.reason,
                                    "kind": m.kind} for m in left]},
                   table([(r.name, str(r.version), r.digest[:16]) for r in refs], ("name", "version", "manifest"))
                   + (f"\n{notes}" if notes else ""))

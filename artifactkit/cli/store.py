"""``publish``, ``download``, ``verify``, ``gc`` and ``ls``: thin shells over :class:`Store`."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import attrs

from artifactkit.cli.common import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    emit_json,
    human_bytes,
    report_error,
    table,
)
from artifactkit.cli.progress import activity
from artifactkit.errors import ArtifactkitError, ReownedWarning
from artifactkit.store.store import Store


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


def _workers_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--workers", type=_positive, default=None, metavar="N",
                        help=f"processes that {what} (1: this process only), at most the CPUs this process "
                             "may use and one per 200 files (more would only wait); default: 1 below 4,000 "
                             "files, else the CPUs this process may use (at most 8); every check is the same")


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
    p.set_defaults(func=_publish)

    p = _parser(subparsers, "download", "download NAME[@VERSION] into DEST (which must not exist)",
                "Restore a version with exact modes, owners, xattrs and ACLs, hard links, holes, inode flags "
                "and nanosecond mtime/atime, verify every digest and every value by reading it back, then "
                "make DEST appear in one rename.")
    p.add_argument("ref", metavar="NAME[@VERSION]", help="artifact name, latest version unless @VERSION (1, 2, ...)")
    p.add_argument("dest", metavar="DEST", help="destination directory; must not exist")
    p.add_argument("--owners", choices=("exact", "current"), default="exact",
                   help="exact (default): restore every owner, refuse (exit 2) where this user cannot; current: "
                        "take your own ownership and clear setuid/setgid and privileged xattrs of re-owned entries")
    _workers_option(p, "create and restore files")
    p.set_defaults(func=_download)

    p = _parser(subparsers, "verify", "check every manifest and blob (read-only); exit 1 on findings",
                "Hash every manifest and every blob it needs, and list corrupt, missing, unreadable and "
                "orphaned items; nothing is changed.")
    p.set_defaults(func=_verify)

    p = _parser(subparsers, "gc", "remove what no version needs: unreferenced blobs, abandoned staging",
                "Under the store's exclusive lock (publishers wait), remove every blob no readable manifest "
                "references and every staging leftover of an interrupted publish, and report the bytes freed "
                "(blocks allocated to what was removed). An unreadable manifest stops the sweep (exit 1).")
    p.add_argument("--dry-run", action="store_true", help="report what would be removed and freed; remove nothing")
    p.set_defaults(func=_gc)

    p = _parser(subparsers, "ls", "list published versions",
                "List every visible version: name, version and manifest sha256 (no manifest is read).")
    p.set_defaults(func=_ls)


def _ref_doc(ref: Any) -> dict[str, Any]:
    return {"name": ref.name, "version": ref.version, "digest": ref.digest}


def _guarded(action: Any, args: argparse.Namespace) -> int:
    try:
        return int(action(args))
    except (ArtifactkitError, OSError, LookupError, ValueError, NotImplementedError) as err:
        # A failed check (integrity, mismatch) is exit 1; bad input or environment is exit 2. Anything
        # else goes on to main, the last line of defence.
        return report_error(err, json_output=bool(getattr(args, "json", False)),
                            source=getattr(args, "src", None), destination=getattr(args, "dest", None),
                            **{"--store": args.store})


def _publish(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        with activity(f"publishing {a.src} as {a.name}", json_output=a.json):
            ref = Store(a.store).publish(a.src, a.name, stat_cache=a.stat_cache, workers=a.workers, links=a.links)
        if a.json:
            emit_json({"schema": "artifactkit.publish/1", **_ref_doc(ref)})
        else:
            print(f"published {ref} (manifest sha256 {ref.digest})")
        return EXIT_OK
    return _guarded(run, args)


def _download(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ReownedWarning)
            with activity(f"downloading {a.ref} into {a.dest}", json_output=a.json):
                ref = Store(a.store).download(a.ref, a.dest, owners=a.owners, workers=a.workers)
        warned = [w.message for w in caught if issubclass(w.category, ReownedWarning)]
        reowned = [str(message) for message in warned]
        if a.json:
            # Every changed entry as data ("path (what changed)"), beside the short messages.
            entries = [entry for message in warned for entry in vars(message).get("entries", [])]
            emit_json({"schema": "artifactkit.download/1", "dest_verified": True, "reowned": reowned,
                       "reowned_entries": entries, **_ref_doc(ref)})
        else:
            print(f"downloaded {ref} into {a.dest}: every entry verified exact (mode, owner, xattrs, links, "
                  "holes, flags, mtime_ns, atime_ns)")
            for line in reowned:
                print(f"note: {line}")
        return EXIT_OK
    return _guarded(run, args)


def _verify(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        with activity(f"verify: hashing every manifest and blob in {a.store}", json_output=a.json):
            report = Store(a.store).verify()
        if a.json:
            emit_json({"schema": "artifactkit.verify/1", "clean": report.clean, **attrs.asdict(report)})
        else:
            rows = [(kind, str(len(items)), "; ".join(items[:3]) + (" ..." if len(items) > 3 else ""))
                    for kind, items in (("corrupt", report.corrupt), ("missing", report.missing),
                                        ("unreadable", report.unreadable), ("orphaned", report.orphaned),
                                        ("in progress", report.in_progress))]
            print(table(rows, ("finding", "count", "items")))
            leftovers = f"ok, with leftovers: `artifactkit gc --store {a.store}` removes them"
            verdict = "clean" if report.clean else (leftovers if report.ok else "NOT OK")
            print(f"\n{report.versions} version(s), {report.blobs_checked} blob(s) hashed: {verdict}")
        return EXIT_OK if report.clean else EXIT_FAILED
    return _guarded(run, args)


def _gc(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        with activity(f"gc: sweeping {a.store}", json_output=a.json):
            report = Store(a.store).gc(dry_run=a.dry_run)
        if a.json:
            emit_json({"schema": "artifactkit.gc/1", **attrs.asdict(report)})
            return EXIT_OK
        blobs, staging = len(report.removed_blobs), len(report.removed_staging)
        if not (blobs or staging):
            print(f"{'would remove' if a.dry_run else 'removed'} nothing: no leftovers in {a.store}")
        elif a.dry_run:
            print(f"would remove {blobs} blob(s) and {staging} staging leftover(s), "
                  f"freeing {human_bytes(report.freed_bytes)} (dry run: nothing removed)")
        else:
            print(f"removed {blobs} blob(s) and {staging} staging leftover(s), "
                  f"freed {human_bytes(report.freed_bytes)}")
        return EXIT_OK
    return _guarded(run, args)


def _ls(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        refs = Store(a.store).list()
        if a.json:
            emit_json({"schema": "artifactkit.ls/1", "versions": [_ref_doc(r) for r in refs]})
        else:
            print(table([(r.name, str(r.version), r.digest[:16]) for r in refs], ("name", "version", "manifest")))
        return EXIT_OK
    return _guarded(run, args)

"""``publish``, ``download``, ``verify`` and ``ls``: thin shells over :class:`Store`."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from artifactkit.cli.common import EXIT_FAILED, EXIT_OK, EXIT_SETUP, emit_json, error, table
from artifactkit.errors import (
    ArtifactkitError,
    IntegrityError,
    MetadataMismatchError,
    TimestampNotRepresentable,
)
from artifactkit.store.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("publish", help="publish a directory tree as the next version of NAME")
    p.add_argument("src")
    p.add_argument("--store", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_publish)

    p = subparsers.add_parser("download", help="download NAME[@VERSION] into DEST (which must not exist)")
    p.add_argument("ref", metavar="NAME[@VERSION]")
    p.add_argument("dest")
    p.add_argument("--store", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_download)

    p = subparsers.add_parser("verify", help="check every manifest and blob (read-only); exit 1 on findings")
    p.add_argument("--store", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_verify)

    p = subparsers.add_parser("ls", help="list published versions")
    p.add_argument("--store", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ls)


def _ref_doc(ref: Any) -> dict[str, Any]:
    return {"name": ref.name, "version": ref.version, "digest": ref.digest}


def _guarded(action: Any, args: argparse.Namespace) -> int:
    try:
        return int(action(args))
    except (ArtifactkitError, OSError, LookupError, ValueError) as err:
        # A failed check (integrity, mismatch) is exit 1; bad input or environment is exit 2.
        error(str(err))
        failed = (IntegrityError, MetadataMismatchError, TimestampNotRepresentable)
        return EXIT_FAILED if isinstance(err, failed) else EXIT_SETUP


def _publish(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        ref = Store(a.store).publish(a.src, a.name)
        if a.json:
            emit_json({"schema": "artifactkit.publish/1", **_ref_doc(ref)})
        else:
            print(f"published {ref} (manifest sha256 {ref.digest})")
        return EXIT_OK
    return _guarded(run, args)


def _download(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        ref = Store(a.store).download(a.ref, a.dest)
        if a.json:
            emit_json({"schema": "artifactkit.download/1", "dest_verified": True, **_ref_doc(ref)})
        else:
            print(f"downloaded {ref} into {a.dest}: every entry verified exact (mode, mtime_ns, atime_ns)")
        return EXIT_OK
    return _guarded(run, args)


def _verify(args: argparse.Namespace) -> int:
    def run(a: argparse.Namespace) -> int:
        report = Store(a.store).verify()
        if a.json:
            emit_json({"schema": "artifactkit.verify/1", "clean": report.clean, **attrs.asdict(report)})
        else:
            rows = [(kind, str(len(items)), "; ".join(items[:3]) + (" ..." if len(items) > 3 else ""))
                    for kind, items in (("corrupt", report.corrupt), ("missing", report.missing),
                                        ("unreadable", report.unreadable), ("orphaned", report.orphaned),
                                        ("in progress", report.in_progress))]
            print(table(rows, ("finding", "count", "items")))
            verdict = "clean" if report.clean else ("ok, with leftovers for gc" if report.ok else "NOT OK")
            print(f"\n{report.versions} version(s), {report.blobs_checked} blob(s) hashed: {verdict}")
        return EXIT_OK if report.clean else EXIT_FAILED
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

"""``conformance``: placeholder until its module lands (owned by the engineer building it)."""

from __future__ import annotations

import argparse

from artifactkit.cliutil import EXIT_SETUP, error


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("conformance", help="(not yet available)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    error("conformance is not available yet")
    return EXIT_SETUP

"""The ``artifactkit`` command: one small builder per subcommand, logic in library functions."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from collections.abc import Sequence

from artifactkit.cli.common import error

# Each module exposes ``register(subparsers)``, which adds its parser and sets ``func`` to a
# callable taking the parsed namespace and returning an exit code.
SUBCOMMAND_MODULES = (
    "artifactkit.cli.probe",
    "artifactkit.cli.diagnose",
    "artifactkit.cli.conformance",
    "artifactkit.cli.store",
)


def _version() -> str:
    try:
        return importlib.metadata.version("artifactkit")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="artifactkit",
        description="Prove that an artifact store preserves file metadata exactly "
                    "(exit 0: all checks hold, 1: a check failed, 2: setup/isolation/usage error).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on usage errors, 0 on --help
        return int(exit_.code or 0)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        error("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""The ``artifactkit`` command: one small builder per subcommand, logic in library functions."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import attrs

from artifactkit.cli.common import documents_written
from artifactkit.cli.result import failure, interrupted, render

#: Which module registers each command, so that running one imports only its module: ``publish`` took
#: 0.32 s on a 128-file tree, 12 ms of it publishing, because every module imported its engine (tracing,
#: conformance, the probe). A test holds this to what the modules register.
COMMAND_MODULES = {"probe": "artifactkit.cli.probe", "diagnose": "artifactkit.cli.diagnose",
                   "conformance": "artifactkit.cli.conformance", "publish": "artifactkit.cli.store",
                   "download": "artifactkit.cli.store", "verify": "artifactkit.cli.store",
                   "gc": "artifactkit.cli.store", "forget": "artifactkit.cli.store", "ls": "artifactkit.cli.store",
                   "diff": "artifactkit.cli.store"}
# Each module exposes ``register(subparsers)``, which adds its parsers and sets ``func`` to a
# callable taking the parsed namespace and returning an exit code.
SUBCOMMAND_MODULES = tuple(dict.fromkeys(COMMAND_MODULES.values()))


def _version() -> str:
    import importlib.metadata  # noqa: PLC0415 - only for --version (a fifth of the command's start-up)
    try:
        return importlib.metadata.version("artifactkit")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def version_line(prog: str = "artifactkit") -> str:
    """What ``--version`` prints: the version and the engine a publish or download would run on now
    (:func:`artifactkit.engine.select.engine_info`), e.g. ``artifactkit 0.1.0 (engine: native, 2 threads)``."""
    from artifactkit.engine.select import engine_info  # noqa: PLC0415 - only for --version: it loads the store
    return f"{prog} {_version()} (engine: {engine_info().describe()})"


class _VersionAction(argparse.Action):
    """``--version``, with the version and the engine looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show the program's version number and the engine in use, and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(version_line(parser.prog))
        parser.exit()


class UsageError(Exception):
    """The command line is not one the parser accepts (argparse's own message: a missing argument, a bad
    value); argparse has already printed the usage and the message on stderr. Exit 2, as argparse exits."""


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is raised (:class:`UsageError`) instead of exiting, so that ``main``
    renders it like every other error: under ``--json`` one ``artifactkit.error/1`` document too. Subparsers
    are made of the parser's own class, so every subcommand's errors come here."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise UsageError(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` (a known one) only the module that registers it."""
    parser = _Parser(
        prog="artifactkit",
        description="Prove that an artifact store preserves file metadata exactly "
                    "(exit 0: all checks hold, 1: a check failed, 2: setup/isolation/usage error, 130: interrupted).")
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else SUBCOMMAND_MODULES
    for module in modules:
        importlib.import_module(module).register(subparsers)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, if its first argument is one (anything else: the whole parser)."""
    return argv[0] if argv and argv[0] in COMMAND_MODULES else None


def main(argv: Sequence[str] | None = None, *, on_parsed: Callable[[], object] | None = None,
         on_interrupted: Callable[[], object] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Never a traceback: a command maps the errors it expects (naming the argument at fault); whatever
    gets past it, or out of its own handler, still becomes one line on stderr (and with ``--json`` one
    ``artifactkit.error/1`` document) and the exit code of its class (:func:`~artifactkit.cli.common.exit_code_of`).
    ``on_parsed`` runs once the arguments are parsed (and the command's module imported), before the command:
    the console script gives Python's SIGINT handler back there (:mod:`artifactkit.cli.entry`).
    ``on_interrupted`` runs once a Ctrl-C has decided the exit code, before its line is printed: the console
    script ignores later presses there, so none is answered after the last line (a command's worker threads can
    keep the process a few tenths of a second longer).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    json_output = "--json" in argv  # until the arguments are parsed; then what they say
    before = documents_written()
    try:
        parser = build_parser(_command_of(argv))
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # argparse exits 0 on --help and --version
            return int(exit_.code or 0)
        except UsageError as err:  # its usage and message are on stderr already: the document is what is left
            return render(attrs.evolve(failure(err), messages=()), json_output=json_output)
        json_output = bool(getattr(args, "json", False))
        if on_parsed is not None:
            on_parsed()
        return int(args.func(args))
    except KeyboardInterrupt:
        if on_interrupted is not None:
            on_interrupted()
        # One line; and one document, unless the command's own was written before the interrupt came.
        return render(interrupted(), json_output=json_output and documents_written() == before)
    except Exception as err:  # noqa: BLE001 - the last line of defence, by design
        return render(failure(err, expected=False), json_output=json_output and documents_written() == before)

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

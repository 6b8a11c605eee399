"""The console script's first module: Ctrl-C at any moment is one line on stderr and exit 130.

``main``'s ``try`` catches a ``KeyboardInterrupt`` only once it runs, but the script imports the CLI before
that, and a Ctrl-C in those imports (argparse, the error types: about 0.1 s warm, half a second cold) was a
Python traceback. So this module, which imports nothing Python has not loaded already at start-up, first
replaces the SIGINT handler with one that writes the line and ends the process (nothing to clean up yet),
and hands SIGINT to the command's handler once ``main`` has parsed the arguments: from there a first Ctrl-C is a
``KeyboardInterrupt`` again, so every ``finally`` (a publish's staging, a download's private directory) runs, and
later ones wait for that cleanup (:mod:`artifactkit.cli.interrupts`).

Not covered: what the interpreter does before it runs this line (its start-up, ``site`` and the ``.pth``
files of the installation, e.g. an editable install's finder); a Ctrl-C that early is Python's own.
"""

# No ``from __future__ import annotations``, no os, no signal: each is a module to load (os imports stat and
# posixpath; signal imports enum) while a Ctrl-C is still Python's. ``_signal``, ``posix`` and ``sys`` are
# built into the interpreter and loaded with it.
import _signal  # type: ignore[import-not-found]  # no stub: it is signal's C half
import posix
import sys

TYPE_CHECKING = False  # not typing's: importing typing takes milliseconds (type checkers take any such name)
if TYPE_CHECKING:
    from types import FrameType

#: The line an interrupt prints, as :func:`artifactkit.cli.common.error` would (which is not imported yet).
_LINE = b"artifactkit: error: interrupted\n"
_EXIT_INTERRUPTED = 130  # common.EXIT_INTERRUPTED, which a test holds this to
#: What ``--json`` prints for an interrupt, as :func:`artifactkit.cli.result.interrupted` renders it (json is
#: not imported yet either); a test holds the two to the same bytes.
_JSON = (b'{\n  "exit_code": 130,\n  "fields": {},\n  "message": "interrupted",\n'
         b'  "schema": "artifactkit.error/1",\n  "type": "KeyboardInterrupt"\n}\n')


def _interrupted_while_starting(signum: int, frame: "FrameType | None") -> None:
    posix.write(2, _LINE)
    if "--json" in sys.argv[1:]:  # as main decides before it has parsed the arguments
        _write_all(1, _JSON)
    posix._exit(_EXIT_INTERRUPTED)  # nothing to flush or clean up yet, and no traceback


def _write_all(fd: int, data: bytes) -> None:
    # A pipe takes 200 bytes whole (PIPE_BUF is 4096); a loop all the same, as a short write is allowed.
    while data:
        data = data[posix.write(fd, data):]


_signal.signal(_signal.SIGINT, _interrupted_while_starting)


def run() -> int:
    """The ``artifactkit`` console script (and ``python -m artifactkit.cli``): :func:`~artifactkit.cli.main.main`
    with Ctrl-C handled from this module's first line on."""
    from artifactkit.cli.interrupts import handle_interrupts, ignore_interrupts  # noqa: PLC0415 - as main
    from artifactkit.cli.main import main  # noqa: PLC0415 - under the start-up handler, on purpose

    try:
        # The command's handler only once its modules are imported: a KeyboardInterrupt raised in an import can
        # land in importlib's weakref callback, where Python prints "Exception ignored" and drops it (seen: the
        # publish then waited for its lock as if never interrupted).
        code = main(sys.argv[1:], on_parsed=handle_interrupts, on_interrupted=ignore_interrupts)
    except KeyboardInterrupt:  # between on_parsed and main's own handler, or inside that handler
        ignore_interrupts()
        posix.write(2, _LINE)
        from artifactkit.cli.common import documents_written  # noqa: PLC0415 - loaded by main already

        if "--json" in sys.argv[1:] and documents_written() == 0:
            _write_all(1, _JSON)
        code = _EXIT_INTERRUPTED
    ignore_interrupts()
    return code

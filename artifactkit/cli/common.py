"""What every subcommand shares: exit codes, one renderer for human and JSON output."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

from artifactkit.errors import ArtifactkitError

EXIT_OK: Final = 0        #: every check held
EXIT_FAILED: Final = 1    #: a check failed (mismatches, corrupt store, ...)
EXIT_SETUP: Final = 2     #: setup, isolation or usage error


def emit_json(doc: dict[str, Any], stream: TextIO | None = None) -> None:
    """One JSON document, sorted keys, on stdout."""
    out = stream or sys.stdout
    out.write(json.dumps(doc, sort_keys=True, indent=2) + "\n")


#: The epilog of every subcommand's --help: scripts branch on these.
EXIT_CODES_HELP: Final = ("exit codes: 0 all checks hold; 1 a check failed (mismatches found); "
                          "2 setup, isolation or usage error")


def describe(err: BaseException, **arguments: str | None) -> str:
    """One line for a person: no ``[Errno N]``, and the argument at fault named when a path is one.

    ``arguments`` maps a name people know (``source``, ``--store``) to the value given; an
    ``OSError`` about that path says so: ``source /nonexistent: No such file or directory``.
    """
    if isinstance(err, OSError) and not isinstance(err, ArtifactkitError) and err.strerror:
        where = os.fsdecode(err.filename) if err.filename is not None else None
        label = next((name for name, value in arguments.items()
                      if value and where and os.path.abspath(value) == os.path.abspath(where)), None)
        if where is None:
            return err.strerror
        return f"{label + ' ' if label else ''}{where}: {err.strerror}"
    return str(err)


def error(message: str) -> None:
    """A setup/usage error for people, on stderr."""
    sys.stderr.write(f"artifactkit: error: {message}\n")


def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain aligned table (no terminal codes), for summaries that also land in logs."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)

"""What every subcommand shares: exit codes, one renderer for human and JSON output."""

from __future__ import annotations

import collections
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

from artifactkit.errors import (
    ArtifactkitError,
    IntegrityError,
    ManifestLimitError,
    MetadataMismatchError,
    TimestampNotRepresentable,
    UnsafeStoreError,
)

EXIT_OK: Final = 0        #: every check held
EXIT_FAILED: Final = 1    #: a check failed (mismatches, corrupt store, ...)
EXIT_SETUP: Final = 2     #: setup, isolation or usage error (and anything unexpected: see exit_code_of)
EXIT_INTERRUPTED: Final = 130  #: Ctrl-C (128 + SIGINT, as a shell reports it)

#: The classes that mean "a check failed" (exit 1): what was stored or restored is not what was recorded.
_FAILED_CHECKS: Final = (IntegrityError, MetadataMismatchError, TimestampNotRepresentable)


def emit_json(doc: dict[str, Any], stream: TextIO | None = None) -> None:
    """One JSON document, sorted keys, on stdout."""
    out = stream or sys.stdout
    out.write(json.dumps(doc, sort_keys=True, indent=2) + "\n")


#: The epilog of every subcommand's --help: scripts branch on these.
EXIT_CODES_HELP: Final = ("exit codes: 0 all checks hold; 1 a check failed (mismatches found); "
                          "2 setup, isolation or usage error")


def exit_code_of(err: BaseException) -> int:
    """The documented exit code of an exception's class: 1 for a failed check, 130 for Ctrl-C, else 2.

    2 covers more than bad input: an :class:`UnsafeStoreError` (a store whose layout was tampered with: a
    setup problem of the store, nothing was changed), a :class:`ManifestLimitError` (a setting must change:
    the message names it), and anything unexpected (a bug is not a failed check; the line says which class).
    """
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(err, (UnsafeStoreError, ManifestLimitError)):
        return EXIT_SETUP  # named so that no reordering of _FAILED_CHECKS can move them
    return EXIT_FAILED if isinstance(err, _FAILED_CHECKS) else EXIT_SETUP


def describe(err: BaseException, **arguments: str | None) -> str:
    """One line for a person: no ``[Errno N]``, and the argument at fault named when a path is one.

    ``arguments`` maps a name people know (``source``, ``--store``) to the value given; an
    ``OSError`` about that path says so: ``source /nonexistent: No such file or directory``. An
    ``OSError`` may name an fd instead of a path (a call on an open file: ``fd 7: ...``).
    """
    if isinstance(err, OSError) and not isinstance(err, ArtifactkitError) and err.strerror:
        where = _where(err.filename)
        label = next((name for name, value in arguments.items()
                      if value and where and os.path.abspath(value) == os.path.abspath(where)), None)
        if where is None:
            return one_line(err.strerror)
        second = _where(err.filename2)
        if second is not None:
            where = f"{where} -> {second}"
        return one_line(f"{label + ' ' if label else ''}{where}: {err.strerror}")
    text = str(err)
    if isinstance(err, ManifestLimitError) and err.context.get("setting") and err.context["setting"] not in text:
        text = f"{text} (setting: {err.context['setting']})"
    return one_line(text)


def _where(name: object) -> str | None:
    """An ``OSError`` filename as text: a path (str, bytes, PathLike), an fd (int), or whatever it is."""
    if name is None:
        return None
    if isinstance(name, int):  # os.fsdecode(int) is a TypeError: the handler itself used to crash here
        return f"fd {name}"
    if isinstance(name, (str, bytes, os.PathLike)):
        return os.fsdecode(name)
    return repr(name)


#: How many entries of a refusal stderr shows: 2,029 lines (103 KB) for one download was no message to read.
SUMMARY_ENTRIES: Final = 10


def summarize(message: str) -> str:
    """``message`` for a person: on one line (:func:`one_line`) unless it lists more entries (one per line after
    its first) than :data:`SUMMARY_ENTRIES`; then its first line, the first few entries, and how many there are
    in all, within one screen. ``--json`` carries every entry in the error's fields."""
    parts = [part.strip() for part in message.splitlines() if part.strip()]
    if len(parts) <= SUMMARY_ENTRIES + 1:
        return one_line(message)
    head, entries = parts[0], parts[1:]
    shown = "".join(f"\n  {entry}" for entry in entries[:SUMMARY_ENTRIES])
    # Entries read "path: what": the kinds are the whats, most common first (a path holding ": " only
    # splits its kind wrongly, and the kinds are a summary; --json has the entries themselves).
    kinds = collections.Counter(entry.partition(": ")[2] for entry in entries if ": " in entry)
    by_kind = "; ".join(f"{count} {kind}" for kind, count in kinds.most_common(_SUMMARY_KINDS))
    more = f" ({len(kinds) - _SUMMARY_KINDS} other kinds)" if len(kinds) > _SUMMARY_KINDS else ""
    return (f"{head}{shown}\n  ... and {len(entries) - SUMMARY_ENTRIES} more: {len(entries)} entries in all "
            f"(--json lists every one){chr(10) + '  by kind: ' + by_kind + more if kinds else ''}")


#: How many kinds of entry the summary counts.
_SUMMARY_KINDS: Final = 3


def one_line(text: str) -> str:
    """``text`` on one line: a multi-line message (every refused entry, one per line) joined with "; "."""
    return "; ".join(part.strip() for part in text.splitlines() if part.strip()) or text.strip()


def report_error(err: BaseException, *, json_output: bool = False, expected: bool = True,
                 **arguments: str | None) -> int:
    """Tell a person (one line on stderr) and a script (``--json``: one ``artifactkit.error/1`` document on
    stdout) what went wrong; return the exit code of its class. ``expected=False`` (the last line of
    defence): a class artifactkit does not raise on purpose is named as an internal error, for the report."""
    code = exit_code_of(err)
    message = describe(err, **arguments)
    if not expected and not isinstance(err, (ArtifactkitError, OSError)):
        message = f"internal error ({type(err).__name__}){': ' + message if message else ''}"
    # Many entries: a summary for the person (JSON's message and fields keep them all); else describe's line.
    many = isinstance(err, ArtifactkitError) and len(str(err).splitlines()) > SUMMARY_ENTRIES + 1
    error(summarize(str(err)) if many else message)
    if json_output:
        fields = err.context if isinstance(err, ArtifactkitError) else {}
        if isinstance(err, OSError) and not isinstance(err, ArtifactkitError):
            fields = {"errno": err.errno, "filename": _where(err.filename)}
        emit_json({"schema": "artifactkit.error/1", "type": type(err).__name__, "message": message,
                   "exit_code": code, "fields": {key: _plain(value) for key, value in fields.items()}})
    return code


def _plain(value: object) -> object:
    """A context value as JSON can carry it (a path, a list of entries, a number; else its text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value)


def error(message: str) -> None:
    """A setup/usage error for people, on stderr."""
    sys.stderr.write(f"artifactkit: error: {message}\n")


def human_bytes(count: int) -> str:
    """A byte count for people, in binary units: ``1.1 MiB`` (below 1 KiB the exact count)."""
    if count < 1024:
        return f"{count} B"
    size, units = count / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while size >= 1024 and len(units) > 1:
        size /= 1024
        units.pop(0)
    return f"{size:.1f} {units[0]}"


def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain aligned table (no terminal codes), for summaries that also land in logs."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)

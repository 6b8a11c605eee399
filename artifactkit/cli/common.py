"""What every subcommand shares: exit codes (one table), one-line messages, JSON and tables for output.

The result type and its renderer are :mod:`artifactkit.cli.result`."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
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
EXIT_SETUP: Final = 2     #: setup, isolation or usage error (and anything unexpected: see EXIT_CODES)
EXIT_INTERRUPTED: Final = 130  #: Ctrl-C (128 + SIGINT, as a shell reports it)

#: The one table from exception class to exit code: the first class of an error's MRO listed here decides
#: (:func:`exit_code_of`), so a subclass gets its parent's code unless it is listed itself. Every command, the
#: last line of defence in ``main`` and the ``--json`` error document read their code from here alone.
EXIT_CODES: Final[Mapping[type[BaseException], int]] = {
    KeyboardInterrupt: EXIT_INTERRUPTED,
    # A failed check: what was stored or restored is not what was recorded.
    IntegrityError: EXIT_FAILED,
    MetadataMismatchError: EXIT_FAILED,
    TimestampNotRepresentable: EXIT_FAILED,
    # Listed although their bases say the same: a store whose layout was tampered with is a setup problem of
    # the store (nothing was changed), an over-limit manifest a setting to change (the message names it); no
    # new entry for a base class of theirs may turn either into a failed check.
    UnsafeStoreError: EXIT_SETUP,
    ManifestLimitError: EXIT_SETUP,
    ArtifactkitError: EXIT_SETUP,  # bad input or environment, named by the error
    OSError: EXIT_SETUP,           # errno failures: a path, a permission, a full disk
    # Anything else is a bug, and a bug is not a failed check (the line says "internal error" and the class).
    BaseException: EXIT_SETUP,
}


def emit_json(doc: dict[str, Any], stream: TextIO | None = None) -> None:
    """One JSON document, sorted keys, on stdout, written and flushed whole.

    A Ctrl-C while it is written is held back until it is out: one landing in the middle of a large document
    on a slow pipe would leave half a document, and ``main`` (which sees :func:`documents_written` move) no
    way to add a whole one. The interrupt then comes from here, as the handler it was held from would have
    raised it.
    """
    global _DOCUMENTS_WRITTEN  # noqa: PLW0603 - one count per process, like stdout itself
    out = stream or sys.stdout
    text = json.dumps(doc, sort_keys=True, indent=2) + "\n"
    with _sigint_held():
        out.write(text)
        out.flush()
        _DOCUMENTS_WRITTEN += 1


_DOCUMENTS_WRITTEN = 0


def documents_written() -> int:
    """How many JSON documents this process has written: ``main`` compares before and after a command, so
    that an interrupt after the command's document does not add a second one."""
    return _DOCUMENTS_WRITTEN


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT's Python handler swapped for one that notes the signal, and the noted signal handed to the
    previous handler afterwards. Not a signal mask: a process-directed SIGINT may go to any thread that does
    not block it (the native engine's), while Python runs every handler in the main thread, so swapping the
    handler holds it back wherever the kernel delivered it."""
    came: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    except ValueError:  # not the main thread (an embedding caller's worker): Python runs no handler here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if came and callable(previous):
            previous(signal.SIGINT, None)  # Python's own: KeyboardInterrupt, now the document is whole
        elif came and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


#: The epilog of every subcommand's --help: scripts branch on these.
EXIT_CODES_HELP: Final = ("exit codes: 0 all checks hold; 1 a check failed (mismatches found); "
                          "2 setup, isolation or usage error; 130 interrupted (Ctrl-C); --json prints one "
                          "document in every case, artifactkit.error/1 for 2 and 130")


def exit_code_of(err: BaseException) -> int:
    """The documented exit code of an exception's class, from :data:`EXIT_CODES`."""
    return next(EXIT_CODES[cls] for cls in type(err).__mro__ if cls in EXIT_CODES)


def describe(err: BaseException, **arguments: str | None) -> str:
    """One line for a person: no ``[Errno N]``, and the argument at fault named when a path is one.

    ``arguments`` maps a name people know (``source``, ``--store``) to the value given; an
    ``OSError`` about that path says so: ``source /nonexistent: No such file or directory``. An
    ``OSError`` may name an fd instead of a path (a call on an open file: ``fd 7: ...``).
    """
    if isinstance(err, OSError) and not isinstance(err, ArtifactkitError) and err.strerror:
        where = path_text(err.filename)
        label = next((name for name, value in arguments.items()
                      if value and where and os.path.abspath(value) == os.path.abspath(where)), None)
        if where is None:
            return one_line(err.strerror)
        second = path_text(err.filename2)
        if second is not None:
            where = f"{where} -> {second}"
        return one_line(f"{label + ' ' if label else ''}{where}: {err.strerror}")
    text = str(err)
    if isinstance(err, ManifestLimitError) and err.context.get("setting") and err.context["setting"] not in text:
        text = f"{text} (setting: {err.context['setting']})"
    return one_line(text)


def path_text(name: object) -> str | None:
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


def error(message: str) -> None:
    """A setup/usage error for people, on stderr."""
    sys.stderr.write(f"artifactkit: error: {message}\n")


def human_bytes(count: int) -> str:
    """A byte count for people, in binary units and at most three digits before the unit: ``1.1 MiB``,
    ``12.3 MiB``, ``103 MiB``, then ``1.0 GiB`` (below 1 KiB the exact count). A progress line's rate keeps its
    width whatever the speed, so the line fits an 80-column terminal (``103.0 MiB/s`` did not)."""
    if count < 1024:
        return f"{count} B"
    size, units = count / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while round(size) >= 1000 and len(units) > 1:
        size /= 1024
        units.pop(0)
    return f"{size:.1f} {units[0]}" if round(size, 1) < 100 else f"{size:.0f} {units[0]}"


def table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain aligned table (no terminal codes), for summaries that also land in logs."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)

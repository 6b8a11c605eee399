"""The CLI's result type: what one command did, rendered as text for a person or as one JSON document.

Every command builds one :class:`Result` (pipx's ``OperationResult`` is the model) and :func:`render` alone
writes it, so the human and the ``--json`` face of an outcome cannot drift apart: a success, a failed check,
a setup error and an interrupt are each one result with an exit code, and under ``--json`` each is exactly one
document on stdout, with a ``schema`` key. Errors are ``artifactkit.error/1``: ``type`` (the exception's
class), ``message``, ``exit_code`` (:data:`~artifactkit.cli.common.EXIT_CODES`) and ``fields`` (the error's
context as data: every entry a download refused, every link a ``--links contained`` publish refused).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from artifactkit.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    SUMMARY_ENTRIES,
    describe,
    emit_json,
    error,
    exit_code_of,
    path_text,
    summarize,
)
from artifactkit.errors import ArtifactkitError

ERROR_SCHEMA: Final = "artifactkit.error/1"
#: The message of an interrupt: the one line a Ctrl-C prints (``artifactkit: error: interrupted``).
INTERRUPTED: Final = "interrupted"


@attrs.frozen
class Result:
    """One command's outcome: its exit code, its ``--json`` document, and what a person reads.

    ``text`` goes to stdout without ``--json``; ``messages`` go to stderr either way, one
    ``artifactkit: error:`` line each (an error, a copier's refusal), so a script that parses stdout still
    finds them in its log.
    """

    exit_code: int
    document: dict[str, Any] = attrs.field()
    text: str = ""
    messages: tuple[str, ...] = ()

    @document.validator
    def _has_a_schema(self, attribute: object, value: dict[str, Any]) -> None:
        if not isinstance(value.get("schema"), str):
            raise TypeError(f"a result's document names its schema, not {sorted(value)}")


def success(document: dict[str, Any], text: str, *, exit_code: int = EXIT_OK,
            messages: tuple[str, ...] = ()) -> Result:
    """A command that ran to its verdict (exit 0, or 1 when a check failed)."""
    return Result(exit_code, document, text, messages)


def failure(err: BaseException, *, expected: bool = True, prefix: str = "",
            arguments: Mapping[str, str | None] | None = None) -> Result:
    """What ``err`` means for a person and a script, with the exit code of its class.

    ``arguments`` name the paths a command was given (:func:`~artifactkit.cli.common.describe`); ``prefix``
    says what could not be done (``cannot probe: ``), for the person only. ``expected=False`` (the last line
    of defence): a class artifactkit does not raise on purpose is named as an internal error, for the report.
    A refusal of many entries is a summary within one screen on stderr; the document keeps every entry.
    """
    if isinstance(err, KeyboardInterrupt):
        return interrupted()
    message = describe(err, **(arguments or {}))
    if not expected and not isinstance(err, (ArtifactkitError, OSError)):
        message = f"internal error ({type(err).__name__}){': ' + message if message else ''}"
    many = isinstance(err, ArtifactkitError) and len(str(err).splitlines()) > SUMMARY_ENTRIES + 1
    return Result(exit_code_of(err), error_document(err, message), "",
                  (prefix + (summarize(str(err)) if many else message),))


def interrupted() -> Result:
    """Ctrl-C: exit 130, one line, and an ``artifactkit.error/1`` of type ``KeyboardInterrupt``."""
    return Result(EXIT_INTERRUPTED, error_document(KeyboardInterrupt(), INTERRUPTED), "", (INTERRUPTED,))


def error_document(err: BaseException, message: str) -> dict[str, Any]:
    """``artifactkit.error/1`` for ``err``: its class, ``message``, its exit code and its fields as data."""
    fields: Mapping[str, object] = err.context if isinstance(err, ArtifactkitError) else {}
    if isinstance(err, OSError) and not isinstance(err, ArtifactkitError):
        fields = {"errno": err.errno, "strerror": err.strerror, "filename": _path(err.filename),
                  "filename2": _path(err.filename2)}
    return {"schema": ERROR_SCHEMA, "type": type(err).__name__, "message": message,
            "exit_code": exit_code_of(err), "fields": {str(key): plain(value) for key, value in fields.items()}}


def _path(name: object) -> object:
    """An ``OSError`` filename as JSON holds it: an fd as its number, a path as its text."""
    return name if name is None or isinstance(name, int) else path_text(name)


def plain(value: object) -> object:
    """A context value as JSON carries it: lists stay lists (every refused entry, every link), mappings stay
    objects, sets become sorted lists; a path or anything else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(item) for item in value), key=str)
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return os.fsdecode(value)
    return str(value)


def render(result: Result, *, json_output: bool) -> int:
    """Write ``result`` (stderr lines, then the document or the text on stdout); return its exit code."""
    for line in result.messages:
        error(line)
    if json_output:
        emit_json(result.document)
    elif result.text:
        print(result.text)
    return result.exit_code


#: A command's work: the parsed arguments in, one result out (an error it expects raised, not returned).
Build = Callable[[Any], Result]


def command(build: Build, *expected: type[BaseException],
            arguments: Callable[[Any], dict[str, str | None]] = lambda args: {},
            prefix: str = "") -> Callable[[Any], int]:
    """The ``func`` a subcommand's parser sets: ``build``, its ``expected`` errors turned into error results,
    and the one rendering. A ``KeyboardInterrupt`` goes on to ``main``, after every ``finally`` on the way
    (a publish's staging, a download's private directory) has run."""
    def run(args: Any) -> int:
        try:
            result = build(args)
        except expected as err:
            result = failure(err, prefix=prefix, arguments=arguments(args))
        return render(result, json_output=bool(getattr(args, "json", False)))
    run.__doc__ = build.__doc__
    return run

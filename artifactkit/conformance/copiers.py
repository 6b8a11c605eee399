"""Name a copy step for the conformance kit: an argv template, ``module:function`` or ``artifactkit``.

Every copier becomes one shape, ``run(src, dst)``, where ``dst`` does not exist yet and must hold a
copy of the tree at ``src`` when ``run`` returns. Templates are split shell-free (:func:`shlex.split`)
and run without a shell, so a path with spaces or a leading dash is one argument, never code.

A command gets :data:`DEFAULT_TIMEOUT_S` (``ARTIFACTKIT_COPIER_TIMEOUT_S`` changes it) to finish: a copier
that opens a FIFO of the corpus as if it were a file (``cp -r --copy-contents``) blocks in ``open`` until a
writer comes, which is never. It runs in a session of its own, and on the timeout that whole process group
is killed (a wrapper script's children too) and the run is a copier failure naming the timeout, never a
hang. A ``module:function`` copier runs in this process and cannot be stopped so: it must not block.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from artifactkit.store.store import Store

SRC: Final = "{src}"
DST: Final = "{dst}"
#: The copier name that means our own store: publish ``src``, then download into ``dst``.
ARTIFACTKIT: Final = "artifactkit"

CopyFunction = Callable[[str, str], object]
#: How long one run of a command copier may take by default; a corpus tree copies in well under a second.
DEFAULT_TIMEOUT_S: Final = 300.0
TIMEOUT_SETTING: Final = "ARTIFACTKIT_COPIER_TIMEOUT_S"
_CALLABLE_SPEC: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class CopierError(Exception):
    """A copier could not be resolved from its description (a usage error, not a failed check)."""


class CopyFailedError(Exception):
    """The copier ran and reported failure (non-zero exit).

    The message is one readable line; ``command`` is the full argv as a shell line and ``stderr`` the
    whole of it, both sanitized (the temporary paths become ``{src}``/``{dst}``) for the JSON report.
    """

    def __init__(self, message: str, *, command: str | None = None, stderr: str | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.stderr = stderr

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_copy_failed, (str(self), self.command, self.stderr))

    @property
    def detail(self) -> str:
        """The whole story for a setup error: the one-line message, the command and the full stderr."""
        parts = [str(self)]
        if self.command:
            parts.append(f"command: {self.command}")
        if self.stderr and self.stderr.strip():
            parts.append(self.stderr.rstrip())
        return "\n".join(parts)


def _rebuild_copy_failed(message: str, command: str | None, stderr: str | None) -> CopyFailedError:
    return CopyFailedError(message, command=command, stderr=stderr)


def excerpt(text: str, limit: int = 200) -> str:
    """One table cell from a tool's stderr: its first line, and its last (where a traceback ends)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "no message"
    cell = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return cell if len(cell) <= limit else cell[:limit - 3] + "..."



@attrs.frozen
class NamedCopier:
    """A copy step with a label for reports (``run(src, dst)`` must create ``dst``)."""

    label: str
    run: CopyFunction = attrs.field(eq=False)

    def __call__(self, src: str, dst: str) -> None:
        self.run(src, dst)


def argv_copier(template: Sequence[str], *, label: str | None = None) -> NamedCopier:
    """A copier running ``template`` with ``{src}``/``{dst}`` replaced inside each argument.

    Substitution is textual (``{src}/`` gives rsync its trailing slash); no shell is involved.
    """
    argv = list(template)
    joined = " ".join(argv)
    if not argv or SRC not in joined or DST not in joined:
        raise CopierError(f"copier template {shlex.join(argv)!r} must name both {SRC} and {DST}")

    def run(src: str, dst: str) -> None:
        actual = [arg.replace(SRC, src).replace(DST, dst) for arg in argv]
        try:
            done = run_with_timeout(actual, timeout_s=copier_timeout_s())
        except OSError as err:  # no such program, or not executable: it never ran
            raise CopyFailedError(f"cannot run {argv[0]!r}: {err.strerror}", command=shlex.join(argv),
                                  stderr=str(err.strerror)) from err
        except subprocess.TimeoutExpired as err:
            said = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else (err.stderr or "")
            stderr = said.replace(dst, DST).replace(src, SRC)
            raise CopyFailedError(
                f"timed out after {err.timeout:g} s and was killed (a FIFO opened as a file blocks until a writer "
                f"comes; {TIMEOUT_SETTING} sets the limit): {excerpt(stderr)}", command=shlex.join(argv),
                stderr=stderr) from err
        if done.returncode != 0:
            # Evidence is sanitized: the temporary paths become the placeholders they came from.
            stderr = done.stderr.replace(dst, DST).replace(src, SRC)
            raise CopyFailedError(f"exit status {done.returncode}: {excerpt(stderr)}",
                                  command=shlex.join(argv), stderr=stderr)

    return NamedCopier(label or shlex.join(argv), run)


def copier_timeout_s() -> float:
    """:data:`DEFAULT_TIMEOUT_S`, or ``ARTIFACTKIT_COPIER_TIMEOUT_S`` when set (read at each run)."""
    text = os.environ.get(TIMEOUT_SETTING, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CopierError(f"{TIMEOUT_SETTING}={text!r} is not a positive number of seconds")
    return value


def run_with_timeout(argv: Sequence[str], *, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (stdin closed, output captured); past ``timeout_s`` kill its whole process group and
    raise :class:`subprocess.TimeoutExpired` with what it wrote to stderr so far."""
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as expired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing else is in this group
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(argv, timeout_s, output=out, stderr=err) from expired
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def store_copy(src: str, dst: str) -> None:
    """Our own store's copy step: publish ``src`` into a scratch store, download it to ``dst``.

    The scratch store sits beside ``dst`` (same filesystem, removed afterwards) so the download's
    staging directory is created where ``dst`` will live, as in real use.
    """
    with tempfile.TemporaryDirectory(prefix=".artifactkit-store-", dir=os.path.dirname(dst) or ".") as root:
        store = Store(root)
        store.download(store.publish(src, "conformance"), dst)


def callable_copier(spec: str) -> NamedCopier:
    """Import ``module:function`` (dotted attribute paths allowed after the colon).

    The current directory is importable, as with ``python -m``: an installed console script
    would otherwise see only its own directory, and a project's copier lives in the project.
    """
    module_name, _, attr_path = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
        for part in attr_path.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise CopierError(f"cannot import copier {spec!r}: {err}") from err
    if not callable(target):
        raise CopierError(f"copier {spec!r} is not callable")
    return NamedCopier(spec, target)


def resolve_copier(spec: str | Sequence[str] | CopyFunction | NamedCopier) -> NamedCopier:
    """Turn any accepted copier description into a :class:`NamedCopier`.

    A string is ``artifactkit``, a named adapter (``restic``, ``borg``, ... see
    :mod:`artifactkit.conformance.adapters`), ``module:function``, or a template such as
    ``'rsync -a --atimes {src}/ {dst}'``; a list is an argv template; a callable is used as is.
    """
    if isinstance(spec, NamedCopier):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text == ARTIFACTKIT:
            return NamedCopier(ARTIFACTKIT, store_copy)
        from artifactkit.conformance import adapters  # noqa: PLC0415 - named adapters load on use
        if text in adapters.ADAPTERS:
            return NamedCopier(text, adapters.runner(text))
        if SRC in text or DST in text:
            try:
                return argv_copier(shlex.split(text), label=text)
            except ValueError as err:  # unbalanced quotes
                raise CopierError(f"cannot split copier template {text!r}: {err}") from err
        if _CALLABLE_SPEC.match(text):
            return callable_copier(text)
        raise CopierError(f"{text!r} is not a copier: give 'CMD ... {SRC} ... {DST}', module:function, "
                          f"or {ARTIFACTKIT}")
    if callable(spec):
        name = getattr(spec, "__qualname__", None) or repr(spec)
        return NamedCopier(f"{getattr(spec, '__module__', '?')}:{name}", spec)
    return argv_copier(spec)

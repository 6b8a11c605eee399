"""What every named adapter shares: find its tool, run each step in the open, fail as a setup error.

A step runs without a shell, with stdin from ``/dev/null`` (a tool that wants to ask something fails
instead of hanging, and its question is in the error) and output captured whole. A non-zero exit is
:class:`ToolFailedError` with the full command and the whole stderr; a missing tool is
:class:`ToolMissingError` naming the package that provides it. Both are setup errors (exit 2):
a store that fails half-way has no verdict, never a row of passes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final

import attrs

from artifactkit.errors import ToolFailedError, ToolMissingError

#: How each placeholder stands for a path in recorded commands and errors (evidence carries no paths).
SRC: Final = "{src}"
DST: Final = "{dst}"
TMP: Final = "{tmp}"


def find(tool: str, package: str) -> str:
    """The executable ``tool``: on ``PATH``, or beside this Python (an un-activated venv's ``bin``)."""
    found = shutil.which(tool) or shutil.which(tool, path=os.path.dirname(sys.executable))
    if found is None:
        raise ToolMissingError(f"{tool!r} is not installed (or not on PATH); install {package}",
                               tool=tool, package=package)
    return found


@attrs.define
class Steps:
    """One adapter run: its source, destination and scratch directory, and every command it ran."""

    src: str
    dst: str
    tmp: str
    log: list[str] = attrs.field(factory=list)
    #: More run-specific text -> placeholder (a bucket prefix made per run, an endpoint's port).
    marks: dict[str, str] = attrs.field(factory=dict)

    def clean(self, text: str) -> str:
        """``text`` with the run's paths replaced by ``{tmp}``, ``{dst}``, ``{src}`` (longest first)."""
        pairs = [(self.tmp, TMP), (self.dst, DST), (self.src, SRC), *self.marks.items()]
        for path, mark in sorted(pairs, key=lambda p: -len(p[0])):
            text = text.replace(path, mark)
        return text

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
            unset: Collection[str] = ()) -> str:
        """Run one step; return its stdout. Non-zero exit: :class:`ToolFailedError`, stderr whole.

        ``unset`` names variables taken out of the inherited environment (logged as ``env -u NAME``).
        """
        # The tool by name, not by where it is installed: evidence carries no paths.
        command = self.clean(shlex.join([os.path.basename(argv[0]), *argv[1:]]))
        where = f"(cd {self.clean(cwd)} && {command})" if cwd else command
        dropped = [name for name in sorted(unset) if name in os.environ]
        settings = " ".join([*(f"-u {name}" for name in dropped),
                             *(f"{k}={self.clean(v)}" for k, v in sorted((env or {}).items()))])
        self.log.append((f"env {settings} {where}" if dropped else f"{settings} {where}").strip())
        inherited = {k: v for k, v in os.environ.items() if k not in dropped}
        done = subprocess.run(list(argv), cwd=cwd, env={**inherited, **(env or {})}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace", check=False)
        if done.returncode != 0:
            stderr = self.clean(done.stderr)
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
            raise ToolFailedError(
                f"{os.path.basename(argv[0])} exited {done.returncode}: {last}\n  command: {where}\n"
                f"--- its stderr ---\n{stderr}",
                command=self.log[-1], returncode=done.returncode, stderr=stderr)
        return done.stdout


@contextmanager
def steps(src: str, dst: str, name: str, log: list[str] | None = None) -> Iterator[Steps]:
    """A scratch directory for the tool's repository, removed afterwards; ``dst`` must not exist.

    It sits beside ``dst`` (as the ``artifactkit`` copier's scratch store does): a tool that restores
    into its own directory is then moved into place by a rename, which changes nothing, never by a
    cross-device copy, which would change everything.
    """
    if os.path.lexists(dst):
        raise FileExistsError(f"the destination must not exist before the copy: {dst}")
    parent = os.path.dirname(os.path.abspath(dst))
    with tempfile.TemporaryDirectory(prefix=f".artifactkit-{name}-", dir=parent) as tmp:
        yield Steps(os.path.abspath(src), os.path.abspath(dst), tmp, log if log is not None else [])


def version(argv: Sequence[str], package: str, *, line_starts: str = "", tool: str = "") -> str:
    """The first line of a tool's version output (or the first starting with ``line_starts``).

    ``tool``: the adapter's own executable, when ``argv`` asks another program (``dpkg-query`` for pax): it
    must be found as the adapter finds it, or a machine without it would look as if it had it.
    """
    if tool:
        find(tool, package)
    exe = find(argv[0], package)
    done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip().startswith(line_starts)]
    return lines[0] if lines else "unknown"

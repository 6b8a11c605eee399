"""Progress for people: one mechanism (``rich``) for every long command, on a terminal only.

Shown when stderr is a terminal and the command was not asked for ``--json``; in a pipe, a log or a script's
capture nothing is written, so output that lands in files stays what it was. ``rich`` is imported only when
a display is shown: ``import artifactkit`` and every command in a pipe stay as light as they were.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Protocol


def shown(*, json_output: bool) -> bool:
    """Whether a command shows progress: stderr is a terminal (not ``TERM=dumb``) and no ``--json``."""
    return not json_output and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


class Update(Protocol):
    """What a command reports as it goes: how far (``completed`` of the ``total`` it was opened with), and a
    short ``detail`` (a check's name, the mismatches so far)."""

    def __call__(self, *, completed: int | None = None, detail: str | None = None) -> None: ...


def _nothing(*, completed: int | None = None, detail: str | None = None) -> None:
    """Where no progress is shown: every update costs a call and nothing else."""


@contextlib.contextmanager
def activity(description: str, *, json_output: bool, total: int | None = None,
             unit: str = "") -> Iterator[Update]:
    """A line on stderr while the block runs: a spinner, ``description``, with a ``total`` a bar and
    "completed/total unit", the latest detail and the time elapsed, refreshed by rich's own thread (so a
    command that reports nothing still shows it is alive); erased when the block ends: only results remain."""
    if not shown(json_output=json_output):
        yield _nothing
        return
    # Only here: rich costs ~0.1 s to import, paid on a terminal alone.
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn(), TextColumn(unit)]
    columns += [TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total, detail="")

        def update(*, completed: int | None = None, detail: str | None = None) -> None:
            if detail is None:
                progress.update(task, completed=completed)
            else:
                progress.update(task, completed=completed, detail=detail)
        yield update

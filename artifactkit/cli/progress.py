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


def shown(*, json_output: bool) -> bool:
    """Whether a command shows progress: stderr is a terminal (not ``TERM=dumb``) and no ``--json``."""
    return not json_output and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


@contextlib.contextmanager
def activity(description: str, *, json_output: bool) -> Iterator[None]:
    """A line on stderr while the block runs: a spinner, ``description`` and the time elapsed, refreshed by
    rich's own thread (the work reports nothing); erased when the block ends, so only results remain."""
    if not shown(json_output=json_output):
        yield
        return
    # Only here: rich costs ~0.1 s to import, paid on a terminal alone.
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        progress.add_task(description, total=None)
        yield

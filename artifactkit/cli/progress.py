"""Progress for people: one mechanism (``rich``) for every long command, on a terminal only.

Shown when stderr is a terminal and the command was not asked for ``--json``; in a pipe, a log or a script's
capture nothing is written, so output that lands in files stays what it was. ``rich`` is imported only when
a display is shown: ``import artifactkit`` and every command in a pipe stay as light as they were.

Two faces of the one display: :func:`activity` for a command that counts its own steps (``diagnose``'s cycles,
``conformance``'s trees), :func:`store_activity` for the store's operations, which report their phases, entries
and bytes through the library's ``progress=`` callback (:mod:`artifactkit.store.progress`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, Protocol

from artifactkit.cli.common import human_bytes

if TYPE_CHECKING:
    from rich.progress import Progress as Display
    from rich.progress import ProgressColumn

    from artifactkit.store.progress import Progress, ProgressCallback


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
def _display(*middle: ProgressColumn | str) -> Iterator[Display]:
    """rich's live display on stderr: a spinner, the task's description, ``middle``, the time elapsed; refreshed
    by rich's own thread (so a command that reports nothing still shows it is alive) and erased when the block
    ends (``transient``): only results remain."""
    # Only here: rich costs ~0.1 s to import, paid on a terminal alone.
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import Progress as Display  # noqa: PLC0415
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    with Display(SpinnerColumn(), TextColumn("{task.description}"), *middle, TimeElapsedColumn(),
                 console=Console(stderr=True), transient=True) as display:
        yield display


@contextlib.contextmanager
def activity(description: str, *, json_output: bool, total: int | None = None,
             unit: str = "") -> Iterator[Update]:
    """A line on stderr while the block runs: with a ``total`` a bar and "completed/total unit", and the latest
    detail (:func:`_display`)."""
    if not shown(json_output=json_output):
        yield _nothing
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn  # noqa: PLC0415 - as in _display

    counted: list[ProgressColumn | str] = [BarColumn(), MofNCompleteColumn(), TextColumn(unit)] \
        if total is not None else []
    with _display(*counted, TextColumn("{task.fields[detail]}")) as display:
        task = display.add_task(description, total=total, detail="")

        def update(*, completed: int | None = None, detail: str | None = None) -> None:
            if detail is None:
                display.update(task, completed=completed)
            else:
                display.update(task, completed=completed, detail=detail)
        yield update


#: What a phase's entries are, for the line ("read 1200/2000 files"); another phase's are "entries".
UNITS: Final = {"scan": "entries", "read": "files", "fetch": "blobs", "create": "entries",
                "manifests": "manifests", "blobs": "blobs", "sweep": "blobs"}


def counts(now: Progress, elapsed_s: float) -> str:
    """The store's progress as a person reads it: the phase, entries done of the total, bytes done of the total
    in binary units, and the rate over the phase's ``elapsed_s`` (bytes where the phase counts bytes, else
    entries): ``read 1200/2000 files  7.8 MiB/13.0 MiB  2.6 MiB/s``. Pure, so tested without a terminal."""
    unit = UNITS.get(now.phase, "entries")
    done = f"{now.entries}/{now.entries_total}" if now.entries_total is not None else str(now.entries)
    parts = [f"{now.phase} {done}" + (f" {unit}" if unit != now.phase else "")]  # not "blobs 3/9 blobs"
    counts_bytes = now.bytes_total is not None or now.bytes > 0
    if counts_bytes:
        total = f"/{human_bytes(now.bytes_total)}" if now.bytes_total is not None else ""
        parts.append(f"{human_bytes(now.bytes)}{total}")
    # No rate before the phase has done anything: "0 B/s" would say it is stuck.
    if elapsed_s > 0 and now.entries > 0:
        parts.append(f"{human_bytes(int(now.bytes / elapsed_s))}/s" if counts_bytes
                     else f"{now.entries / elapsed_s:.0f} {unit}/s")
    return "  ".join(parts)


@contextlib.contextmanager
def store_activity(description: str, *, json_output: bool) -> Iterator[ProgressCallback | None]:
    """The display for a store operation: yields the callback to pass as its ``progress=``, or ``None`` where
    nothing is shown, so that there the operation's progress costs it a test and nothing else (and rich is
    never imported). The line shows :func:`counts`."""
    if not shown(json_output=json_output):
        yield None
        return
    from rich.progress import ProgressColumn, Task  # noqa: PLC0415 - as in _display
    from rich.text import Text  # noqa: PLC0415

    from artifactkit.store.progress import Progress  # noqa: PLC0415 - light (attrs), and only on a terminal

    # The callback only keeps the latest report and when its phase began; the line is formatted when rich
    # draws it (10 times a second), not per report: verify reports every blob, a scan every directory.
    latest = (Progress(""), time.monotonic())

    class Counts(ProgressColumn):
        def render(self, task: Task) -> Text:
            now, started = latest
            return Text(counts(now, time.monotonic() - started) if now.phase else "", no_wrap=True)

    with _display(Counts()) as display:
        display.add_task(description, total=None)

        def report(now: Progress) -> None:
            nonlocal latest
            if now.phase == latest[0].phase:
                latest = (now, latest[1])  # one assignment: rich's thread reads a consistent pair
                return
            latest = (now, time.monotonic())
            display.refresh()  # a new phase is drawn at once, however short it is: none goes unseen
        yield report

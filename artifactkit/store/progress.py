"""What a long store operation reports as it goes: entries and bytes done of a phase, for a person's display.

A caller passes ``progress=`` (a callable taking :class:`Progress`) to :meth:`Store.publish`, ``download``,
``verify`` or ``gc``; it is called from the operation's own thread at each phase's start and after each batch
(about 200 files), never per file, and never changes what the operation does. The CLI draws it with ``rich``
on a terminal (``artifactkit/cli/progress.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs


@attrs.frozen
class Progress:
    """Where an operation is: its ``phase`` ("scan", "read", "create", "manifests", "blobs", "sweep"), how many
    ``entries`` and ``bytes`` of it are done, and of how many (``None``: not known yet, as during a scan)."""

    phase: str
    entries: int = 0
    entries_total: int | None = None
    bytes: int = 0
    bytes_total: int | None = None


#: What a caller passes as ``progress=``.
ProgressCallback = Callable[[Progress], None]


class Reporter:
    """One operation's progress, sent to ``callback`` (``None``: every call costs a test and nothing else)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._now = Progress("")

    def phase(self, name: str, *, entries_total: int | None = None, bytes_total: int | None = None) -> None:
        """A new phase begins (its totals, where known)."""
        self._now = Progress(name, 0, entries_total, 0, bytes_total)
        self._send()

    def advance(self, entries: int, byte_count: int = 0) -> None:
        """``entries`` more entries and ``byte_count`` more bytes of the phase are done."""
        now = self._now
        self._now = attrs.evolve(now, entries=now.entries + entries, bytes=now.bytes + byte_count)
        self._send()

    def reached(self, entries: int) -> None:
        """``entries`` entries of the phase are done so far (a count from the work itself, as the scan's)."""
        self._now = attrs.evolve(self._now, entries=entries)
        self._send()

    def _send(self) -> None:
        if self._callback is not None:
            self._callback(self._now)

"""One conformance failure: a :class:`Mismatch` attributed to one check of one corpus tree."""

from __future__ import annotations

from typing import Final

import attrs

from artifactkit.metadata import drift as dx
from artifactkit.metadata.mismatch import Mismatch

_SHORT: Final = {"mtime_ns": "mtime", "atime_ns": "atime"}
_DESTINATION_TIMES: Final = frozenset({"mtime_ns", "atime_ns", "dir_times", "symlink_times"})


@attrs.frozen
class Failure:
    """One :class:`Mismatch` attributed to one check of one corpus tree."""

    check: str
    corpus: str
    mismatch: Mismatch
    #: For ``copier-failed``: the full command (when it was one) and the whole of its stderr.
    command: str | None = None
    stderr: str | None = None
    #: For a value several rules explained alike on its tree: their names, for the run to settle.
    rivals: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return self.mismatch.path

    @property
    def field(self) -> str:
        return self.mismatch.field

    @property
    def expected(self) -> int | str | None:
        return self.mismatch.expected

    @property
    def actual(self) -> int | str | None:
        return self.mismatch.actual

    @property
    def diagnosis(self) -> str:
        return self.mismatch.diagnosis

    @property
    def delta_ns(self) -> int | None:
        return self.mismatch.delta_ns

    def headline(self) -> str:
        """The short diagnosis a table cell shows (``atime: advanced-by-read, source atime moved ...``)."""
        field = _SHORT.get(self.field, self.field)
        if self.field == "mode":
            head = f"{'special bits' if self.check == 'special_bits' else 'mode'}: {self.diagnosis} " \
                   f"({_octal(self.expected)} -> {_octal(self.actual)})"
        elif self.field == "copier":
            head = f"{self.diagnosis} ({self.actual})"
        else:
            head = f"{field}: {self.diagnosis}"
        if self.check == "source_untouched":
            if self.diagnosis == dx.MISSING:
                return head + ", source entry removed by the copy"
            return head + (", source atime moved by the copy" if self.field == "atime_ns"
                           else f", source {field} changed by the copy")
        if self.diagnosis == dx.SHARES_SOURCE_INODE:
            return head + f", {self.actual}: editing the copy edits the source"
        if self.check == "survives_read":
            return head + ", moved by a read after the copy"
        if self.diagnosis == dx.ADVANCED_BY_READ and self.check in _DESTINATION_TIMES:
            # The kit captured the copy before reading anything: the read was the copier's own.
            return head + ", during the copy, after the time was set"
        return head

    def to_mismatch(self) -> Mismatch:
        """The shared assertion's record of this failure (stage = ``conformance:<corpus>:<check>``)."""
        return attrs.evolve(self.mismatch, stage=f"conformance:{self.corpus}:{self.check}")


def _octal(value: int | str | None) -> str:
    return f"0o{value:04o}" if isinstance(value, int) else str(value)

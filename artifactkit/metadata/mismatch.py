"""One difference between supplied and actual metadata: :class:`Mismatch`, and how it reads."""

from __future__ import annotations

from typing import Final

import attrs

TIME_FIELDS: Final = ("mtime_ns", "atime_ns")
PRESENCE: Final = "presence"


@attrs.frozen
class Mismatch:
    """One field of one path that differs, with both values, the ns delta and a diagnosis."""

    path: str
    field: str
    expected: int | str | None
    actual: int | str | None
    diagnosis: str
    delta_ns: int | None = None
    stage: str | None = None

    def describe(self) -> str:
        """One line a person can act on: field, both values, delta and diagnosis."""
        if self.field in TIME_FIELDS and self.delta_ns is not None:
            return (f"{self.field}: expected {self.expected}, actual {self.actual} "
                    f"(delta {self.delta_ns:+d} ns): {self.diagnosis}")
        if self.field == "mode":
            return f"mode: expected {_octal(self.expected)}, actual {_octal(self.actual)}: {self.diagnosis}"
        return f"{self.field}: expected {self.expected!r}, actual {self.actual!r}: {self.diagnosis}"


def _octal(value: int | str | None) -> str:
    return f"0o{value:04o}" if isinstance(value, int) else repr(value)

"""Write a generated table into the docs page that shows it, between its two markers.

    <!-- generated:NAME -->
    ...replaced on every run...
    <!-- /generated:NAME -->

So a table in ``docs/`` is always the output of a committed run, never typed in by hand.
"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def write_table(page: str, name: str, table: str) -> Path:
    """Replace the block ``name`` in ``docs/<page>`` with ``table``; the markers must already be there."""
    path = DOCS / page
    text = path.read_text(encoding="utf-8")
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} ... {end} block to write the table into")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{start}\n{table.strip()}\n{end}{tail}", encoding="utf-8")
    return path

"""Write a generated table into the docs page that shows it, between its two markers.

    <!-- generated:NAME -->
    ...replaced on every run...
    <!-- /generated:NAME -->

So a table in ``docs/`` is always the output of a committed run, never typed in by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def rerender(evidence: str, render: Callable[[dict[str, Any]], str], page: str, name: str) -> int:
    """``--table-from``: print the table of a kept evidence file and write it into its docs page."""
    with open(evidence, encoding="utf-8") as handle:
        text = render(json.load(handle))
    print(text)
    write_table(page, name, text)
    return 0

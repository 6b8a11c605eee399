"""Read and rewrite a stat cache file's rows as columns of text, for tests that spoil one on purpose."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from artifactkit.store import stat_cache_file

#: One row: [path, fields (hex), digest or "-", rest or "-"].
Rows = list[list[str]]


def read_rows(cache: Path) -> tuple[bytes, Rows]:
    """The cache's header line and its rows."""
    head, _, body = cache.read_bytes().partition(b"\n")
    parts = body.decode("ascii").split("\t")
    paths = json.loads(parts[0])
    count = len(paths)
    return head, [[path, parts[1 + at], parts[1 + count + at], parts[1 + 2 * count + at]]
                  for at, path in enumerate(paths)]


def body_of(rows: Rows) -> bytes:
    """The body that holds ``rows``, laid out as ``stat_cache.body_of`` lays it out."""
    columns = [[row[column] for row in rows] for column in (1, 2, 3)]
    return "\t".join([json.dumps([row[0] for row in rows]), *columns[0], *columns[1], *columns[2], "\n"]).encode()


def rewrite_rows(cache: Path, spoil: Callable[[Rows], bytes | None], *, checksum: bool = True,
                 head_edits: dict[str, object] | None = None) -> None:
    """Change rows (``spoil`` edits them in place, or returns a whole body of its own) and header fields
    (``head_edits``) and, unless ``checksum`` is false, recompute the checksum: a cache that proves itself but
    says something odd."""
    head_line, rows = read_rows(cache)
    body = spoil(rows) or body_of(rows)
    head = {**json.loads(head_line), **(head_edits or {})}
    if checksum:  # both checksums, split where the rests now begin (after the paths, fields and digests)
        parts = body.split(b"\t")
        try:
            count = len(json.loads(parts[0]))
        except ValueError:
            count = 0  # a spoiled paths part: the checksums still cover it
        head["rests_at"] = min(len(body), sum(len(part) + 1 for part in parts[:2 * count + 1]))
        head["rests_sha256"] = hashlib.sha256(body[head["rests_at"]:]).hexdigest()
        head["sha256"] = stat_cache_file.checksum(head, body[:head["rests_at"]])
    cache.write_bytes(json.dumps(head, sort_keys=True).encode() + b"\n" + body)


def row_of(rows: Rows, name: str) -> list[str]:
    """The row whose path ends with ``name``."""
    return next(row for row in rows if row[0].endswith(name))

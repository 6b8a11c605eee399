"""The manifest's field table holds everything that knows a field: ``FileMeta``'s attributes in order, the writer
(its fast path too), the reader (its fast path too) and the native core's own table. Each guard is a function the
tests below also aim at a copied table with a field added, and see fail."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from artifactkit.errors import IntegrityError
from artifactkit.manifest.encode import Manifest, encode_entry, encode_entry_by_json
from artifactkit.manifest.extended import INODE_FIELDS
from artifactkit.manifest.fields import ALL_KINDS, FIELDS, KIND_FIELDS, LINK_INODE, Field
from artifactkit.manifest.limits import FILE_BYTES_SETTING
from artifactkit.manifest.parse import parse_entry, parse_entry_in_full
from artifactkit.metadata.model import FIELD_ORDER, KINDS, FileMeta
from tests.support.both_parses import parse_both

ROOT = Path(__file__).resolve().parent.parent
#: Where the crate keeps its copy of the table: ``(key, the kinds that carry it)``, one row per written field.
RUST_TABLE = "MANIFEST_FIELDS"
_SAMPLE_TEXT = {"path": "d/p", "target": "t", "hardlink": "d/a"}


def sample(field: Field, kind: str) -> Any:
    """A value of ``field`` an entry of ``kind`` could record: the largest its bounds allow, so a reader's bound
    that is tighter than the table's refuses it."""
    if field.name == "mode" and kind == "symlink":
        return 0o777  # Linux symlinks are 0o777: no other mode reads back
    if field.name == "kind":
        return kind
    highs = [high - 1 for _, high in field.bounds]
    return {"int": highs[0] if highs else 2, "text": _SAMPLE_TEXT.get(field.name, "x"), "sha256": "ab" * 32,
            "xattrs": (("user.a", b"v"),), "link": _SAMPLE_TEXT["hardlink"], "runs": ((0, 1),),
            "device": tuple(highs), "kind": kind}[field.type]


def full_entry(kind: str, table: Sequence[Field] = FIELDS) -> FileMeta:
    """An entry of ``kind`` with every field of ``FileMeta`` that ``table`` lets it carry recorded."""
    values: dict[str, Any] = {field.name: sample(field, kind) for field in table
                              if kind in field.kinds and field.name in FIELD_ORDER}
    values.pop("nlink", None)  # never in a manifest: it would not read back
    if kind != "file" or "size" not in values:
        values.pop("extents", None)
    return FileMeta(**values)


def drift(table: Sequence[Field]) -> list[str]:
    """Where the writer, the reader or ``FileMeta`` disagree with ``table``."""
    problems = []
    names = tuple(field.name for field in table)
    if names != FIELD_ORDER:
        problems.append(f"the table's fields {names} are not FileMeta's, in order: {FIELD_ORDER}")
    for kind in KINDS:
        entry = full_entry(kind, table)
        written = json.loads(encode_entry(entry))
        carried = {field.key for field in table if field.key and kind in field.kinds}
        problems += [f"the writer leaves {key!r} out of a full {kind}" for key in sorted(carried - written.keys())]
        problems += [f"the writer puts {key!r} in a {kind}: no row says so" for key in sorted(written.keys() - carried)]
        for read in (parse_entry, parse_entry_in_full):
            try:
                parsed = read(written, where="m")
            except IntegrityError as err:
                problems.append(f"{read.__name__} refuses a full {kind}: {err}")
                continue
            problems += [f"{read.__name__} does not read {field.key!r} of a {kind} back" for field in table
                         if field.key and kind in field.kinds
                         and getattr(parsed, field.name, None) != sample(field, kind)]
    return problems


def refusals(table: Sequence[Field]) -> list[str]:
    """Where the reader takes a value ``table`` says it refuses: one past a bound, a field on a kind without it."""
    problems = []
    for field in table:
        if not field.key or field.type not in ("int", "device") or not field.bounds:
            continue
        for kind in sorted(field.kinds):
            doc = json.loads(encode_entry(full_entry(kind)))
            for past in _past_bounds(field):
                doc[field.key] = past
                for read in (parse_entry, parse_entry_in_full):
                    try:
                        parsed = read(dict(doc), where="m")
                    except IntegrityError:
                        if not field.refused:
                            problems.append(f"{read.__name__} refuses {field.key}={past}, which it should drop")
                        continue
                    if field.refused or getattr(parsed, field.name) is not None:
                        problems.append(f"{read.__name__} takes {field.key}={past} of a {kind}, out of bounds")
    for key, kinds in {field.key: field.kinds for field in table if field.key}.items():
        for kind in sorted(ALL_KINDS - kinds):
            carrier = next(field for field in table if field.key == key)
            doc = json.loads(encode_entry(full_entry(kind)))
            doc[key] = json.loads(json.dumps(_wire(sample(carrier, sorted(kinds)[0]))))
            try:
                parse_entry(doc, where="m")
            except IntegrityError:
                continue
            problems.append(f"the reader takes {key!r} on a {kind}, which the table says it does not carry")
    return problems


def _past_bounds(field: Field) -> list[Any]:
    if field.type == "device":
        (low0, high0), (low1, high1) = field.bounds
        return [[high0, low1], [low0, high1], [low0 - 1, low1]]
    ((low, high),) = field.bounds
    return [high, low - 1]


def _wire(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_wire(item) for item in value]
    return value.decode() if isinstance(value, bytes) else value


def rust_table(root: Path = ROOT) -> dict[str, frozenset[str]]:
    """The crate's ``MANIFEST_FIELDS``: key -> the kinds that carry it (empty where the crate has none)."""
    for path in sorted((root / "native" / "src").rglob("*.rs")):
        text = path.read_text()
        if f"const {RUST_TABLE}" not in text:
            continue
        body = text.split(f"const {RUST_TABLE}", 1)[1].split("];", 1)[0]
        kind_consts = dict(re.findall(r"const (\w+): &\[&str\] = &\[([^\]]*)\];", text))
        table = {}
        for key, kinds in re.findall(r'\(\s*"(\w+)",\s*(\w+|&\[[^\]]*\])\s*\)', body):
            listed = kind_consts.get(kinds, kinds)
            table[key] = frozenset(re.findall(r'"(\w+)"', listed))
        return table
    return {}


def rust_drift(table: Sequence[Field], rust: dict[str, frozenset[str]]) -> list[str]:
    want = {field.key: field.kinds for field in table if field.key}
    problems = [f"the crate's {RUST_TABLE} has no {key!r}" for key in sorted(want.keys() - rust.keys())]
    problems += [f"the crate's {RUST_TABLE} has {key!r}, no row of the table" for key in sorted(rust.keys() - want)]
    problems += [f"{key!r} is carried by {sorted(rust[key])} in the crate, {sorted(kinds)} in the table"
                 for key, kinds in want.items() if key in rust and rust[key] != kinds]
    # The crate passes its pair fields to FileMeta last, by position, where its own test holds its rows in order.
    if [key for key in rust if key in want] != [key for key in want if key in rust]:
        problems.append(f"the crate's {RUST_TABLE} is not in the table's order")
    return problems


def _with_a_field_added() -> list[Field]:
    return [*FIELDS, Field("colour", "colour", "int", optional=True, bounds=((0, 8),))]


def test_the_table_is_filemetas_fields_and_the_writer_and_the_reader_follow_it() -> None:
    assert drift(FIELDS) == []


def test_the_drift_guard_fails_on_a_table_with_a_field_nothing_else_knows() -> None:
    problems = drift(_with_a_field_added())
    assert any("FileMeta's" in problem for problem in problems)
    assert any("writer leaves 'colour' out" in problem for problem in problems)


def test_the_drift_guard_fails_on_a_table_whose_kinds_or_bounds_the_writer_and_reader_do_not_follow() -> None:
    table = [attrs.evolve(field, kinds=ALL_KINDS) if field.name == "target" else field for field in FIELDS]
    assert "the writer leaves 'target' out of a full file" in drift(table)
    wider = [attrs.evolve(field, bounds=((0, 2**33),)) if field.name == "uid" else field for field in FIELDS]
    assert any(problem.startswith("parse_entry refuses a full dir") for problem in drift(wider))


def test_the_reader_refuses_what_the_table_bounds_and_kinds_refuse() -> None:
    assert refusals(FIELDS) == []


def test_the_refusal_guard_fails_on_a_table_with_a_wider_bound_or_a_kind_the_reader_refuses() -> None:
    narrower = [attrs.evolve(field, bounds=((0, 2**31),)) if field.name == "uid" else field for field in FIELDS]
    assert "parse_entry_in_full takes uid=2147483648 of a block, out of bounds" in refusals(narrower)
    fewer = [attrs.evolve(field, kinds=frozenset({"dir"})) if field.name == "flags" else field for field in FIELDS]
    assert "the reader takes 'flags' on a file, which the table says it does not carry" in refusals(fewer)


def test_the_plain_file_fast_paths_write_and_read_what_the_table_says() -> None:
    plain = attrs.evolve(full_entry("file"), xattrs=(), hardlink=None, extents=None)
    line = encode_entry(plain)
    assert line == encode_entry_by_json(plain)
    assert parse_entry(json.loads(line), where="m") == parse_entry_in_full(json.loads(line), where="m") == plain


def test_the_derived_sets_are_the_ones_the_reader_checks() -> None:
    assert set(INODE_FIELDS) == LINK_INODE  # the order there is the order a refusal names the field in
    assert list(KIND_FIELDS) == ["size", "sha256", "target", "extents", "flags"]


@pytest.mark.skipif(not (ROOT / "native" / "src").is_dir(), reason="the crate's source is not in this tree")
def test_the_crates_table_is_the_tables_keys_and_kinds() -> None:
    rust = rust_table()
    assert rust, f"no const {RUST_TABLE} found in native/src: the guard would pass vacuously"
    assert rust_drift(FIELDS, rust) == []


def test_the_crate_guard_fails_on_a_table_with_a_field_the_crate_does_not_know(tmp_path: Path) -> None:
    source = tmp_path / "native" / "src" / "manifest"
    source.mkdir(parents=True)
    (source / "fields.rs").write_text(
        'const ALL: &[&str] = &["file", "dir"];\n'
        f'pub const {RUST_TABLE}: &[(&str, &[&str])] = &[("path", ALL), ("size", &["file"])];\n')
    rust = rust_table(tmp_path)
    assert rust == {"path": frozenset({"file", "dir"}), "size": frozenset({"file"})}
    problems = rust_drift(_with_a_field_added(), rust)
    assert "the crate's MANIFEST_FIELDS has no 'colour'" in problems
    assert "'path' is carried by ['dir', 'file'] in the crate, " + str(sorted(ALL_KINDS)) + " in the table" in problems
    assert "the crate's MANIFEST_FIELDS is not in the table's order" in rust_drift(FIELDS, dict(reversed(rust.items())))


def manifest_of(*entries: FileMeta) -> dict[str, Any]:
    """A whole manifest's document of ``entries`` under ``d/`` (their parents made)."""
    parents = (FileMeta(".", "dir", 0o755, 1, 1), FileMeta("d", "dir", 0o755, 1, 1))
    doc: dict[str, Any] = json.loads(Manifest("demo", (*parents, *entries)).to_bytes())
    return doc


def test_both_engines_read_every_row_as_the_table_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core's parse held to the table through the reference (``parse_both``): every full entry read back,
    every value past a row's bounds and every field on a kind without it refused by both, with one error."""
    monkeypatch.setenv(FILE_BYTES_SETTING, str(2**63 - 1))  # the table's size bound, not the download's policy
    for kind in KINDS:
        later = full_entry(kind)
        entries = [later] if later.hardlink is None else [attrs.evolve(later, path=later.hardlink, hardlink=None),
                                                          later]
        doc = manifest_of(*entries)
        assert parse_both(json.dumps(doc).encode()).entries[2:] == tuple(entries)
        for field in FIELDS:
            if not field.key:
                continue
            values = _past_bounds(field) if field.bounds and kind in field.kinds else []
            if kind not in field.kinds:
                values.append(_wire(sample(field, sorted(field.kinds)[0])))
            for value in values:
                doc["entries"][-1][field.key] = value
                data = json.dumps(doc).encode()
                if field.refused or kind not in field.kinds:
                    with pytest.raises(IntegrityError):
                        parse_both(data)
                else:
                    assert getattr(parse_both(data).entries[-1], field.name) is None
            doc = manifest_of(*entries)

"""A metadata field is a row, not a thread through the house (issue 51): the device number, traced as the example
field, is named in at most ten files of the store, the engines, the format and the crate — the two tables, the
reference's restore and the crate's stat snapshot, the rest going by the rows. The guard is a function the test
below also aims at a tree where a field is handled by hand in one file too many."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where a field's handling lives: the store, the engines, the format (Python) and the native core.
ROOMS = ("artifactkit/store", "artifactkit/engine", "artifactkit/manifest", "native/src")
MAX_FILES = 10


def files_naming(word: str, root: Path = ROOT, rooms: tuple[str, ...] = ROOMS) -> list[str]:
    """The files under ``rooms`` that name ``word`` as a whole word (``grep -rlw``)."""
    whole = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    return sorted(str(path.relative_to(root)) for room in rooms for path in (root / room).rglob("*")
                  if path.suffix in (".py", ".rs") and whole.search(path.read_text(errors="replace")))


def test_the_device_number_is_named_in_at_most_ten_files_of_the_store_the_engines_the_format_and_the_crate() -> None:
    named = files_naming("rdev")
    assert "artifactkit/manifest/fields.py" in named, "the table's own row not found: the guard would be vacuous"
    assert len(named) <= MAX_FILES, named


def test_the_field_guard_counts_every_file_that_names_the_field_as_a_word(tmp_path: Path) -> None:
    for number in range(MAX_FILES + 1):
        (tmp_path / "native" / "src").mkdir(parents=True, exist_ok=True)
        (tmp_path / "native" / "src" / f"m{number}.rs").write_text("let rdev = st.rdev;\n")
    (tmp_path / "native" / "src" / "other.rs").write_text("let st_rdev = 0; // st_rdev is another word\n")
    named = files_naming("rdev", tmp_path, ("native/src",))
    assert len(named) == MAX_FILES + 1 > MAX_FILES
    assert "native/src/other.rs" not in named

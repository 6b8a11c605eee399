"""Partial and contradictory entries (issue 48, classes 8 and 9), read by both parses alike: every field the
format has on every kind (the table below, written from the format's description, not from the code), half an
owner, a hard link's later name claiming another value of any inode field, and random mixtures of all of them.

The rule the table states: a kind has the fields a capture of it records, and a manifest that gives one to
another kind, an owner without both ids, or one inode two values of a field is refused by name; whatever is
accepted carries every claim it made into its entry, so nothing is left for a restore to drop silently.
"""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifactkit import IntegrityError
from artifactkit.metadata.model import KINDS
from tests.support.both_parses import CHECK_ERRORS, parse_both, verdict
from tests.support.hostile_manifest import NAMED, SHA, T, body, doc

Entry = dict[str, Any]

#: Each kind as a capture records it, with only the fields it must have.
BARE: dict[str, Entry] = {
    "file": {"kind": "file", "mode": 0o644, "size": 6, "sha256": SHA},
    "dir": {"kind": "dir", "mode": 0o755},
    "symlink": {"kind": "symlink", "mode": 0o777, "target": "t"},
    "fifo": {"kind": "fifo", "mode": 0o600},
    "char": {"kind": "char", "mode": 0o600, "rdev": [1, 3]},
    "block": {"kind": "block", "mode": 0o600, "rdev": [8, 0]},
}
#: A value of each optional field that passes its own check on the kinds it is read for (extents: ``[]`` is
#: the only run list inside the size 0 of a kind without content, so the refusal left is the kind's).
CLAIMS: dict[str, Entry] = {
    "size": {"size": 6}, "sha256": {"sha256": SHA}, "target": {"target": "t"}, "rdev": {"rdev": [1, 3]},
    "owner": {"uid": 1234, "gid": 5678}, "uid only": {"uid": 1234}, "gid only": {"gid": 5678},
    "xattrs": {"uid": 0, "gid": 0, "xattrs": [["user.k", "dg=="]]}, "flags": {"flags": 0}, "extents": {"extents": []},
}
#: What a kind may carry besides its own required fields; anything else is refused by the named check.
ALLOWED: dict[str, set[str]] = {
    "file": {"size", "sha256", "owner", "xattrs", "flags", "extents"},
    "dir": {"owner", "xattrs", "flags"},
    "symlink": {"target", "owner", "xattrs"},
    "fifo": {"owner", "xattrs"},
    "char": {"rdev", "owner", "xattrs"},
    "block": {"rdev", "owner", "xattrs"},
}
REFUSED_BY = {"uid only": "owner", "gid only": "owner", "rdev": "rdev"}


def entry(path: str, kind: str, **claims: Any) -> Entry:
    return {"path": path, **BARE[kind], "mtime_ns": T, "atime_ns": T, **claims}


@pytest.fixture(autouse=True, scope="module")
def _core(native: ModuleType) -> None:
    """Every test here holds the core to the reference (a skip where it is not built, a failure in CI)."""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("claim", sorted(CLAIMS))
def test_every_field_on_every_kind_is_read_or_refused_as_the_table_says_on_both_parses(kind: str, claim: str) -> None:
    data = body(doc(entry("x", kind, **CLAIMS[claim])))
    if claim in ALLOWED[kind] or claim in BARE[kind]:
        found = parse_both(data).entries[1]
        assert found.kind == kind and all(getattr(found, f) is not None for f in CLAIMS[claim]), found
        return
    check = REFUSED_BY.get(claim, "kind_field")
    assert verdict(data)[:2] == ("manifest_refused", check)  # type: ignore[index]
    with pytest.raises(CHECK_ERRORS[check]) as caught:
        parse_both(data)
    assert "'x'" in str(caught.value)


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"dir"}))
def test_a_later_name_of_every_linkable_kind_with_its_first_names_every_field_is_read(kind: str) -> None:
    first = entry("x", kind, **CLAIMS["xattrs"], **({"flags": 0, "extents": [[0, 6]]} if kind == "file" else {}))
    parsed = parse_both(body(doc(first, {**first, "path": "y", "hardlink": "x"}))).entries
    assert parsed[2] == attrs.evolve(parsed[1], path="y", hardlink="x")


def test_a_directory_is_never_a_hard_link_on_both_parses() -> None:
    data = body(doc(entry("x", "dir"), entry("y", "dir", hardlink="x")))
    assert verdict(data)[:2] == ("manifest_refused", "hardlink")  # type: ignore[index]
    with pytest.raises(IntegrityError):
        parse_both(data)


#: Another value of each inode field than ``entry("x", "file", **FIRST_CLAIMS)`` has.
FIRST_CLAIMS: Entry = {"uid": 0, "gid": 0, "xattrs": [], "flags": 0}
OTHER: dict[str, Entry] = {
    "mode": {"mode": 0o4755}, "uid": {"uid": 1}, "gid": {"gid": 1}, "mtime_ns": {"mtime_ns": T + 1},
    "atime_ns": {"atime_ns": 0}, "xattrs": {"xattrs": [["security.capability", "AQ=="]]}, "flags": {"flags": 16},
    "extents": {"extents": [[0, 6]]}, "sha256": {"sha256": "ab" * 32}, "size": {"size": 5},
}


@pytest.mark.parametrize("field", sorted(OTHER))
def test_a_later_name_claiming_another_value_of_any_inode_field_is_refused_naming_both_names(field: str) -> None:
    first = entry("x", "file", **FIRST_CLAIMS)
    data = body(doc(first, {**first, "path": "y", "hardlink": "x", **OTHER[field]}))
    assert verdict(data)[:2] == ("manifest_refused", "hardlinks")  # type: ignore[index]
    with pytest.raises(IntegrityError) as caught:
        parse_both(data)
    message = str(caught.value)
    assert "'y'" in message and "'x'" in message, message
    assert field in message or "same content" in message, message  # content fields: the older refusal's words


@pytest.mark.parametrize("kind", ["symlink", "fifo", "char"])
def test_a_later_name_of_any_kind_claiming_other_xattrs_is_refused(kind: str) -> None:
    first = entry("x", kind, **CLAIMS["xattrs"])
    later = {**first, "path": "y", "hardlink": "x", "xattrs": [["trusted.k", "dg=="]]}
    with pytest.raises(IntegrityError, match=r"'y' is a hard link to 'x' but claims another xattrs"):
        parse_both(body(doc(first, later)))


# --- random mixtures -------------------------------------------------------------------------------------

_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "size": st.sampled_from([0, 6, 7]), "sha256": st.sampled_from([SHA, "ab" * 32]),
    "target": st.sampled_from(["t", "u"]), "rdev": st.sampled_from([[1, 3], [8, 0]]),
    "uid": st.sampled_from([0, 1234]), "gid": st.sampled_from([0, 5678]),
    "xattrs": st.sampled_from([[], [["user.k", "dg=="]], [["security.capability", "AQ=="]]]),
    "flags": st.sampled_from([0, 16]), "extents": st.sampled_from([[], [[0, 6]], [[1, 5]]]),
    "mode": st.sampled_from([0o644, 0o777, 0o4755]), "mtime_ns": st.sampled_from([T, T + 1]),
}


@st.composite
def mixtures(draw: st.DrawFn) -> list[Entry]:
    """A few entries of random kinds, each with a random set of fields given or taken away, some of them later
    names of another entry, with a random set of its fields copied and others changed."""
    made: list[Entry] = []
    for index in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(KINDS))
        made_entry = entry(f"e{index}", kind)
        for field in draw(st.sets(st.sampled_from(sorted(_FIELD_VALUES)), max_size=4)):
            if draw(st.booleans()):
                made_entry[field] = draw(_FIELD_VALUES[field])
            else:
                made_entry.pop(field, None)
        made.append(made_entry)
    for first in list(made):
        if draw(st.booleans()):
            later = {**copy.deepcopy(first), "path": f"{first['path']}~", "hardlink": first["path"]}
            for field in draw(st.sets(st.sampled_from(sorted(_FIELD_VALUES)), max_size=2)):
                later[field] = draw(_FIELD_VALUES[field])
            made.append(later)
    return made


@given(entries=mixtures())
def test_any_mixture_of_partial_and_contradictory_entries_reads_alike_and_keeps_every_claim(
        entries: list[Entry]) -> None:
    try:
        parsed = parse_both(json.dumps(doc(*entries)).encode())
    except NAMED:
        return  # parse_both held the core's refusal to the reference's
    for raw, found in zip(entries, parsed.entries[1:], strict=True):
        claimed = {key for key, value in raw.items() if value is not None and key in _FIELD_VALUES}
        kept = {field for field in claimed if getattr(found, field) is not None}
        assert kept == claimed, f"{raw['path']}: {sorted(claimed - kept)} accepted but not in the entry"

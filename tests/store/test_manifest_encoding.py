"""The manifest line of an entry is the same bytes whichever way it is encoded: the direct formatting
of the usual file entry is held to the C JSON encoder (sorted keys, ASCII) on every field it could see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit.conformance.corpus import corpus_names, materialize, needs_root
from artifactkit.metadata.model import FileMeta
from artifactkit.store.manifest import encode_entry, encode_entry_by_json
from artifactkit.store.scan import capture_tree
from tests.strategies import modes, timestamps_ns

_IDS = st.integers(min_value=0, max_value=2**32 - 1)
_PATHS = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=1, max_size=40)


@given(path=_PATHS, mode=modes, mtime=timestamps_ns, atime=timestamps_ns, ctime=st.none() | timestamps_ns,
       size=st.integers(min_value=0, max_value=2**62 - 1), uid=st.none() | _IDS, gid=st.none() | _IDS,
       flags=st.none() | _IDS, sha=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
       xattrs=st.sampled_from([None, (), (("user.k", b"v\x00"),)]), hardlink=st.sampled_from([None, "first"]),
       extents=st.sampled_from([None, (), ((0, 1),)]), kind=st.sampled_from(["file", "file", "dir", "symlink"]))
@example(path='quo"te\\back\tslash\n\x00\udcff\U0001f600é', mode=0o4755, mtime=-1, atime=0, ctime=1, size=0, uid=0,
         gid=0, flags=0, sha="0" * 64, xattrs=None, hardlink=None, extents=None, kind="file")
def test_the_direct_line_is_the_json_encoders_line(**fields: Any) -> None:
    kind = fields.pop("kind")
    entry = FileMeta(path=fields["path"], kind=kind, mode=fields["mode"], mtime_ns=fields["mtime"],
                     atime_ns=fields["atime"], size=fields["size"] if kind == "file" else 0,
                     sha256=fields["sha"] if kind == "file" else None, target="t" if kind == "symlink" else None,
                     ctime_ns=fields["ctime"], uid=fields["uid"], gid=fields["gid"], xattrs=fields["xattrs"],
                     hardlink=fields["hardlink"] if kind == "file" else None,
                     extents=fields["extents"] if kind == "file" else None, flags=fields["flags"])
    assert encode_entry(entry) == encode_entry_by_json(entry)


@pytest.mark.parametrize("name", corpus_names())
def test_every_corpus_entry_encodes_the_same_both_ways(fast_tmp: Path, name: str) -> None:
    if needs_root(name):
        pytest.skip(f"corpus {name!r} needs root here: {needs_root(name)}")
    materialize(name, fast_tmp / name)
    for entry in capture_tree(fast_tmp / name):
        assert encode_entry(entry) == encode_entry_by_json(entry), entry.path

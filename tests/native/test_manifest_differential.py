"""The native core's manifest encoding against the reference's ``encode_entry`` + ``manifest_bytes``: the same
bytes for any entries (every kind and field, paths with any character a ``str`` holds, lone surrogates
included, times and sizes at the ends of their ranges), the same refusals, and ``None`` — the reference's
turn — for a value of no exact JSON type."""

from __future__ import annotations

import enum
import json
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifactkit.engine.plan import Plan
from artifactkit.engine.reference.lists import CapturedList
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import ScannedTree, Staged
from artifactkit.errors import ManifestLimitError
from artifactkit.manifest.encode import SortedLines, encode_entry, manifest_bytes
from artifactkit.manifest.limits import MAX_EXTENTS
from artifactkit.manifest.tree_write import split_manifest, write_tree
from artifactkit.metadata.model import FileMeta
from artifactkit.store.publish import assemble, with_content
from tests.native.trees import same_error

_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=1, max_size=12)
_IDS = st.none() | st.integers(min_value=0, max_value=2**32 - 1)
# What a manifest can hold: the kernel's 64-bit seconds, in ns (past 64 bits from 2262 on and before 1677).
_NS = st.integers(min_value=-(2**63) * 10**9, max_value=2**63 * 10**9 - 1) | st.sampled_from(
    [-(2**63) * 10**9, 2**63 * 10**9 - 1, -(2**63) - 1, 2**63, 2**64])
_SHA = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_RUNS = st.none() | st.lists(st.tuples(st.integers(0, 2**62), st.integers(1, 2**62)), max_size=3).map(tuple)
_XATTRS = st.none() | st.lists(st.tuples(_TEXT, st.binary(max_size=20)), max_size=3).map(tuple)


@st.composite
def entries(draw: st.DrawFn) -> FileMeta:
    kind = draw(st.sampled_from(["file", "file", "dir", "symlink", "fifo", "char", "block"]))
    return FileMeta(
        draw(_TEXT), kind, draw(st.integers(0, 0o7777)), draw(_NS), draw(_NS),
        draw(st.integers(0, 2**63 - 1)) if kind == "file" else 0,
        draw(st.none() | _SHA) if kind == "file" else None,
        draw(st.none() | _TEXT) if kind == "symlink" else None,
        draw(st.none() | _NS), draw(_IDS), draw(_IDS), draw(_XATTRS),
        # A file's later name takes its first name's read (the assembly test below); other kinds keep theirs.
        draw(st.none() | _TEXT) if kind != "file" else None, draw(st.none() | st.integers(1, 9)),
        draw(_RUNS) if kind == "file" else None,
        draw(_IDS),
        (draw(st.integers(0, 4095)), draw(st.integers(0, 2**20 - 1))) if kind in ("char", "block") else None)


class _Encoder:
    """The native engine's encoding (:meth:`~artifactkit.engine.native.NativeEngine.encode`) of any entries: a plan
    of ``entries`` with the ``lines`` encoded before and what was ``known`` of them, and the reads ``found``."""

    def __init__(self, native: ModuleType) -> None:
        self.engine = native.NativeEngine(1, "publish")

    def manifest_bytes(self, name: str, noatime: bool, lines: list[tuple[str, str]], entries: list[FileMeta],
                       known: dict[int, Any] | None = None, *, found: list[Staged] | None = None) -> bytes | None:
        tree = ScannedTree("src", CapturedList(entries), {}, listed_noatime=noatime)
        encoded = self.engine.encode(name, tree, Plan(lambda sha, size: False, entries, [], known or {}, lines),
                                     found or [])
        return None if encoded is None else encoded.joined()


@pytest.fixture(scope="session")
def encoder(native: ModuleType) -> _Encoder:
    """The native engine's encoder, made once ``native`` found the core built."""
    return _Encoder(native)


def reference(name: str, noatime: bool, entries: list[FileMeta]) -> bytes:
    return manifest_bytes(name, noatime, [(e.path, encode_entry(e)) for e in entries])


@given(found=st.lists(entries(), max_size=8, unique_by=lambda e: e.path), noatime=st.booleans())
@example(found=[FileMeta("\udcff", "dir", 0o755, -1, 0), FileMeta("\uff71", "dir", 0o755, 0, -(2**63)),
                FileMeta('q"\\\n\x7f\U0001f600', "file", 0o4755, 2**63 - 1, 1, 2**63 - 1, "0" * 64, uid=0, gid=0,
                         xattrs=(("user.\udcff", b"\x00\xff"),), extents=((0, 1), (4, 2)), flags=0)], noatime=False)
def test_the_native_encoder_writes_the_references_bytes(encoder: _Encoder, found: list[FileMeta],
                                                        noatime: bool) -> None:
    ours = encoder.manifest_bytes("artifact.v1", noatime, [], found)
    assert ours == reference("artifact.v1", noatime, found)


@given(found=st.lists(entries(), min_size=1, max_size=6, unique_by=lambda e: e.path), split=st.integers(0, 6),
       facts=st.tuples(_SHA, _IDS, _RUNS))
def test_a_reads_facts_and_lines_encoded_before_merge_as_the_reference_merges_them(
        encoder: _Encoder, found: list[FileMeta], split: int, facts: tuple[str, int | None, Any]) -> None:
    # The first entries come as lines already encoded (a stat cache's); the files after them with a read's facts.
    lines = [(e.path, encode_entry(e)) for e in found[:split]]
    rest = found[split:]
    known = {i: facts for i, e in enumerate(rest) if e.kind == "file"}
    merged = [with_content(e, *known[i]) if i in known else e for i, e in enumerate(rest)]
    assert encoder.manifest_bytes("a", True, list(lines), rest, known) == reference("a", True, [*found[:split],
                                                                                               *merged])


class Flag(enum.IntFlag):
    A = 1


class Text(str):
    __slots__ = ()


@pytest.mark.parametrize(("field", "value"), [
    ("mode", 420.0), ("mode", Flag.A), ("mtime_ns", 2**130), ("path", Text("p")), ("kind", Text("file")),
    ("xattrs", [("user.a", b"x")]), ("xattrs", (("user.a", bytearray(b"x")),)), ("extents", [[0, 1], 5]),
    ("rdev", "1:2"), ("flags", 1.5), ("uid", object()),
])
def test_a_value_of_no_exact_json_type_is_left_to_the_reference(encoder: _Encoder, field: str, value: Any) -> None:
    odd = attrs.evolve(FileMeta("p", "file", 0o644, 1, 2, 3, "0" * 64, uid=0, gid=0, xattrs=()), **{field: value})
    assert encoder.manifest_bytes("a", True, [], [odd]) is None


def test_booleans_and_tuples_of_exact_types_are_encoded_by_the_core_as_json_encodes_them(encoder: _Encoder) -> None:
    odd = FileMeta("p", "dir", True, False, 1, rdev=(1, 2), flags=True)  # type: ignore[arg-type]
    assert encoder.manifest_bytes("a", True, [], [odd]) == reference("a", True, [odd])


def test_a_file_of_more_data_runs_than_a_manifest_may_list_is_refused_alike(encoder: _Encoder) -> None:
    runs = tuple((2 * i, 1) for i in range(MAX_EXTENTS + 1))
    fine = FileMeta("fine", "file", 0o644, 1, 2, 3, "0" * 64, extents=((0, 1),))
    at_limit = FileMeta("holey", "file", 0o644, 1, 2, 2 * len(runs), "0" * 64, extents=runs[:MAX_EXTENTS])
    assert encoder.manifest_bytes("a", True, [], [at_limit]) == reference("a", True, [at_limit])
    holey = attrs.evolve(at_limit, extents=runs)
    errors = []
    for encode in (lambda: reference("a", True, [fine, holey]),
                   lambda: encoder.manifest_bytes("a", True, [], [fine, holey])):
        with pytest.raises(ManifestLimitError) as caught:
            encode()
        errors.append(caught.value)
    same_error(*errors)


def test_a_listing_past_the_manifest_limit_is_encoded_alike_by_both_engines(
        encoder: _Encoder, monkeypatch: pytest.MonkeyPatch) -> None:
    # Format 3 holds each tree object to the limit (tree_write, tests/store/test_tree_limits.py), not the listing
    # both engines encode: neither refuses it, and their bytes are the same.
    monkeypatch.setenv("ARTIFACTKIT_MAX_MANIFEST_BYTES", "200")
    found = [FileMeta(".", "dir", 0o755, 1, 2), FileMeta("f", "file", 0o644, 1, 2, 3, "0" * 64, uid=0, gid=0)]
    body = reference("a", True, found)
    assert len(body) > 200 and encoder.manifest_bytes("a", True, [], found) == body


def _assembled(monkeypatch: pytest.MonkeyPatch, engine: str, entries: list[FileMeta], known: dict[int, Any],
               found: list[Staged]) -> Any:
    monkeypatch.setenv("ARTIFACTKIT_ENGINE", engine)
    tree = ScannedTree("src", CapturedList(entries), {e.path: (1, i) for i, e in enumerate(entries)},
                       listed_noatime=True)
    try:
        listing, recorded = assemble(tree, "tree", Plan(lambda sha, size: False, entries, [], known, []), found,
                                     encode=engine_for(None, "publish").encode)
        return listing.joined(), recorded
    except KeyError as err:
        return KeyError, err.args


@pytest.mark.parametrize("first_read", [True, False], ids=["first-name-read", "first-name-missing"])
def test_a_hard_links_later_names_take_their_first_names_facts_as_the_reference_gives_them(
        encoder: _Encoder, monkeypatch: pytest.MonkeyPatch, first_read: bool) -> None:
    def file(path: str, nlink: int, hardlink: str | None = None) -> FileMeta:
        return FileMeta(path, "file", 0o644, 1, 2, 5, None, None, 3, 0, 0, (), hardlink, nlink)
    entries = [FileMeta(".", "dir", 0o755, 1, 2, ctime_ns=3, uid=0, gid=0, xattrs=(), nlink=2), file("a", 2),
               file("b", 2, hardlink="a"), file("c", 1), file("d", 1), file("e", 2, hardlink="a")]
    known = {3: ("c" * 64, None, None)}
    found = [Staged(4, "d" * 64, False, 8, ((0, 2),), True, "")]  # a read without O_NOATIME, with a hole
    if first_read:
        found.append(Staged(1, "a" * 64, True, 0, None, True, ""))
    native = _assembled(monkeypatch, "native", entries, known, found)
    assert native == _assembled(monkeypatch, "python", entries, known, found)
    if first_read:
        assert native[0].count(b'"sha256": "' + b"a" * 64) == 3 and b'"source_read_noatime": false' in native[0]


def test_a_tree_larger_than_the_cores_chunks_and_buffers_is_the_references_manifest(
        encoder: _Encoder, monkeypatch: pytest.MonkeyPatch) -> None:
    # native/src/py/manifest_bytes.rs encodes 4,096 entries at a time into 1 MiB buffers (manifest/assemble.rs): here
    # 9,000 entries (three chunks, lines across several buffers), a later name of a hard link in the first
    # chunk whose first name is in the third, and one line longer than a buffer (a 1 MiB xattr's base64).
    def file(i: int, hardlink: str | None = None, xattrs: tuple[tuple[str, bytes], ...] = ()) -> FileMeta:
        return FileMeta(f"d/f{i:05}", "file", 0o644, i, 2 * i, 5, None, None, 3, 0, 0, xattrs, hardlink,
                        2 if hardlink or i == 8500 else 1)
    entries = [FileMeta(".", "dir", 0o755, 1, 2, ctime_ns=3, uid=0, gid=0, xattrs=(), nlink=2),
               FileMeta("d", "dir", 0o755, 1, 2, ctime_ns=3, uid=0, gid=0, xattrs=(), nlink=2)]
    entries += [file(i, hardlink="d/f08500" if i == 100 else None,
                     xattrs=(("user.big", bytes(range(256)) * 4096),) if i == 6000 else ()) for i in range(9000)]
    found = [Staged(at, f"{at:064x}", True, 0, None, True, "") for at, e in enumerate(entries)
             if e.kind == "file" and e.hardlink is None]
    native = encoder.manifest_bytes("tree", True, [], entries, {}, found=found)  # not None: not the reference's
    assert native is not None and native == _assembled(monkeypatch, "python", entries, {}, found)[0]
    assert native.count(b'"sha256": "' + f"{8502:064x}".encode()) == 2


def test_lines_handed_over_a_chunk_at_a_time_make_the_same_tree_objects_as_the_joined_text(
        encoder: _Encoder) -> None:
    # 4,096 lines a chunk (native/src/py/manifest_lines.rs): two chunk boundaries, one inside a directory. A line
    # lost, doubled or reordered at a boundary changes the objects, or the root's count of entries.
    entries = [FileMeta(".", "dir", 0o755, 1, 2), FileMeta("d", "dir", 0o755, 1, 2),
               *(FileMeta(f"d/f{i:05d}", "file", 0o644, 1, 2, 3, "0" * 64) for i in range(9_000))]
    tree = ScannedTree("src", CapturedList(entries), {}, listed_noatime=True)
    encoded = encoder.engine.encode("a", tree, Plan(lambda sha, size: False, entries, [], {}, []), [])
    assert encoded is not None
    chunks = [list(chunk) for chunk in encoded.chunks]
    assert [len(chunk) for chunk in chunks] == [4096, 4096, 810]
    objects: dict[str, bytes] = {}
    root, digest = write_tree(SortedLines("a", True, chunks), objects.__setitem__)
    whole = split_manifest(reference("a", True, entries))
    assert (root, digest, objects) == (whole.root, whole.digest, whole.objects)
    assert json.loads(root)["entries"] == len(entries)

"""A download of the core's own parse of its manifest (``engine/native.py``'s ``CoreTree``: the files go from the
parse to the core's create without becoming ``FileMeta`` objects) against the reference engine's download of the same
version: every field of every entry alike on generated trees, under both owners policies; the same refusal
and the same warning, naming every entry; no ``FileMeta`` made for a file where the plan changes nothing; and
the plan reads no field the core's key for it (``native/src/restore/layout.rs``) leaves out."""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifactkit import Store
from artifactkit.engine.reference import restore_meta
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.engine.values import Owners
from artifactkit.errors import IntegrityError, NotRestorableError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.metadata.model import FIELD_ORDER, FileMeta
from artifactkit.store.progress import Progress
from tests.native.trees import (
    File,
    build,
    names,
    native_create,
    python_create,
    restore,
    same_error,
    unique,
    write_blobs,
)
from tests.native.trees import restored as created
from tests.strategies import timestamps_ns
from tests.support.engines import running_on
from tests.support.hostile_manifest import SHA, body, doc, file_entry
from tests.support.hostile_store import forge_manifest, put_blob

#: What the restore sets and a capture reads back: every field but ctime (the restore's own) and nlink's source.
_COMPARED = tuple(name for name in FIELD_ORDER if name != "ctime_ns")
#: The fields ``restore_meta.plan`` reads besides the path: ``restore/layout.rs``'s ``PlanKey``.
PLAN_KEY_FIELDS = frozenset({"kind", "mode", "uid", "gid", "flags", "rdev", "xattrs"})


@pytest.fixture(autouse=True, scope="module")
def _core(native: ModuleType) -> None:
    """Every test here needs the core (a skip where it is not built, a failure in CI)."""


def restored(dest: Path) -> list[tuple[Any, ...]]:
    """Every entry of the tree at ``dest`` as a capture reads it, field by field."""
    return [tuple(getattr(entry, name) for name in _COMPARED) for entry in capture_tree(dest)]


def download_on(engine: str, store: Store, ref: ArtifactRef, dest: Path,
                owners: Owners = "exact") -> tuple[list[tuple[Any, ...]] | BaseException, list[str]]:
    """The download's outcome on ``engine`` (the restored tree, or its error) and the warnings it gave."""
    with running_on(engine), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            store.download(ref, dest, owners=owners)
        except NotRestorableError as err:
            return err, [str(w.message) for w in warned]
    return restored(dest), [str(w.message) for w in warned]


contents = st.sampled_from([b"", b"x", b"same\n"]) | st.binary(max_size=3000)
files = st.builds(File, path=names, data=contents, mode=st.sampled_from([0o644, 0o400, 0o4755, 0o2711, 0o1777]),
                  times=st.tuples(timestamps_ns, timestamps_ns),
                  hole=st.sampled_from([0, 0, 8192]),
                  xattrs=st.dictionaries(st.sampled_from(["user.a", "user.é"]), st.binary(max_size=40), max_size=2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.lists(files, max_size=6), nested=st.lists(files, max_size=5),
       links=st.dictionaries(st.sampled_from(["l1", "l 2", "l-é"]), st.sampled_from(["a", "../out", "sub/x"]),
                             max_size=2),
       hardlink=st.booleans(), fifo=st.booleans(), owners=st.sampled_from(["exact", "current"]),
       dir_mode=st.sampled_from([0o755, 0o700, 0o2775]))
def test_a_download_of_the_cores_parse_restores_the_references_every_field(
        work: Callable[[str], Path], *, top: list[File], nested: list[File], links: dict[str, str], hardlink: bool,
        fifo: bool, owners: Owners, dir_mode: int) -> None:
    src = work("src")
    tree = [f for f in unique(top) if f.path.casefold() not in {n.casefold() for n in [*links, "fifo"]}]
    tree += [File(f"sub/{f.path}", f.data, f.mode, f.times, f.hole, f.xattrs) for f in unique(nested)]
    extra = {"second name": tree[0].path} if hardlink and tree and "second name" not in links else {}
    build(src, tree, dirs=["sub", "sub/deeper"], links=links, hardlinks=extra)
    if fifo:
        os.mkfifo(src / "sub" / "fifo", 0o640)
    os.chmod(src / "sub", dir_mode)
    store = Store(work("store"))
    ref = store.publish(src, "tree")
    dest = work("dest")
    expected = download_on("python", store, ref, dest / "reference", owners)
    assert download_on("native", store, ref, dest / "core", owners) == expected


@pytest.fixture
def plain_tree(work: Callable[[str], Path]) -> Iterator[tuple[Store, ArtifactRef, Path]]:
    src = work("src")
    build(src, [File(f"d{i % 4}/f{i}", b"%d" % i, 0o644 if i % 3 else 0o600, (i, -i)) for i in range(40)],
          links={"l": "d0/f0"})
    store = Store(work("store"))
    yield store, store.publish(src, "tree"), work("dest")


def test_no_file_of_a_plain_tree_becomes_a_filemeta_on_the_way_to_the_core(
        plain_tree: tuple[Store, ArtifactRef, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from artifactkit.engine import native_values as _native_tree

    store, ref, dest = plain_tree
    made: list[str] = []

    def counted(*fields: Any) -> FileMeta:
        made.append(fields[0])
        return FileMeta(*fields)
    monkeypatch.setattr(_native_tree, "FileMeta", counted)
    with running_on("native"):
        store.download(ref, dest / "out")
    # The five directories, one file of each plan key (the first 0o600 one, the first 0o644 one) and the link.
    assert sorted(made) == [".", "d0", "d0/f0", "d0/f16", "d1", "d2", "d3", "l"], made
    assert restored(dest / "out") == download_on("python", store, ref, dest / "reference")[0]


def test_a_re_owning_plan_names_every_entry_as_the_reference_does(
        plain_tree: tuple[Store, ArtifactRef, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, ref, dest = plain_tree
    real_why = restore_meta._changes_for_current
    # Every file re-owned: what a download by another user does (here the process is root, which owns them).
    monkeypatch.setattr(restore_meta, "_changes_for_current",
                        lambda entry, me, groups: [*real_why(entry, me, groups), *(["uid"] * (entry.kind == "file"))])
    expected = download_on("python", store, ref, dest / "reference", "current")
    assert expected[1] and "and 20 more" in expected[1][0]  # 40 files, the message shows 20
    assert download_on("native", store, ref, dest / "core", "current") == expected


@pytest.mark.parametrize("changes", [{"flags": 0x10}, {"mode": 0o4755, "uid": None, "gid": None}],
                         ids=["immutable", "setuid-without-owner"])
def test_a_refused_plan_is_the_references_refusal(work: Callable[[str], Path], changes: dict[str, Any]) -> None:
    store = Store(work("store"))
    ref = store.publish(work("empty"), "demo")
    entries = [file_entry(**{"path": f"f{i}", "uid": 0, "gid": 0, **changes}) for i in range(3)]
    digest = forge_manifest(store, "demo", 1, body(doc(*entries)))
    put_blob(store, SHA, b"hello\n")
    ref = attrs.evolve(ref, digest=digest)
    (reference, _), (found, _) = (download_on(engine, store, ref, work("dest") / "out") for engine in ("python",
                                                                                                        "native"))
    assert isinstance(reference, NotRestorableError) and "f2" in str(reference)
    assert isinstance(found, NotRestorableError)
    same_error(found, reference)


def test_a_flag_bit_past_31_restores_as_the_reference_restores_it(work: Callable[[str], Path]) -> None:
    # A bit no restore sets or compares, as a hand-written manifest may hold it (the parse takes 0..2**32): the
    # core took it as a C int and refused the wire tuple with OverflowError before.
    store = Store(work("store"))
    ref = store.publish(work("empty"), "demo")
    mine = file_entry(flags=2**31, uid=os.getuid(), gid=os.getgid())  # owners any user may restore
    ref = attrs.evolve(ref, digest=forge_manifest(store, "demo", 1, body(doc(mine))))
    put_blob(store, SHA, b"hello\n")
    expected = download_on("python", store, ref, work("dest") / "out")
    assert not isinstance(expected[0], BaseException)
    assert download_on("native", store, ref, work("dest") / "out") == expected


def test_a_flag_bit_past_31_crosses_the_wire_as_the_reference_takes_it(
        native: ModuleType, work: Callable[[str], Path]) -> None:
    src, blobs = work("src"), work("blobs")
    build(src, [File("a", b"x"), File("sub/b", b"y")], dirs=["sub"])
    entries = [attrs.evolve(e, flags=2**31) if e.kind == "file" else e for e in write_blobs(src, blobs)]
    reference, candidate = work("dest") / "tree", work("dest") / "tree"
    restore(entries, reference, blobs, python_create)
    restore(entries, candidate, blobs, native_create(native))
    assert created(candidate, entries) == created(reference, entries)


class _Recorded(FileMeta):
    """A ``FileMeta`` that notes every field read of it (attrs' ``evolve`` and ``__init__`` still work)."""

    __slots__ = ()
    read: set[str] = set()  # noqa: RUF012 - one record for the test, on purpose

    def __getattribute__(self, name: str) -> Any:
        if name in FIELD_ORDER:
            _Recorded.read.add(name)
        return super().__getattribute__(name)


def fields_plan_reads(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every ``FileMeta`` field ``restore_meta._plan`` reads of entries of every kind under both policies to
    decide what to do with them (the copy ``_reowned`` makes of a changed entry reads every field, and is left
    out: a changed entry is never the core's to make)."""
    monkeypatch.setattr(restore_meta, "_reowned", lambda entry, *_: entry)
    _Recorded.read = set()
    entries = [_Recorded(path="d", kind="dir", mode=0o2755, mtime_ns=1, atime_ns=1, uid=0, gid=5, xattrs=(),
                         flags=0x10),
               _Recorded(path="f", kind="file", mode=0o4755, mtime_ns=1, atime_ns=1, size=3, sha256="ab" * 32,
                         uid=5, gid=5, xattrs=(("security.capability", b"x"), ("user.a", b"y")), flags=0x20,
                         extents=((0, 3),), hardlink=None),
               _Recorded(path="l", kind="symlink", mode=0o777, mtime_ns=1, atime_ns=1, target="f"),
               _Recorded(path="c", kind="char", mode=0o600, mtime_ns=1, atime_ns=1, rdev=(1, 3), uid=7, gid=7)]
    for owners in ("exact", "current"):
        for entry in entries:
            restore_meta._plan([entry], owners)
    return _Recorded.read - {"path"}


def test_the_plan_reads_no_field_the_cores_plan_key_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    found = fields_plan_reads(monkeypatch)
    assert found <= PLAN_KEY_FIELDS, \
        f"add {found - PLAN_KEY_FIELDS} to PlanKey in native/src/restore/layout.rs (and here)"
    assert {"kind", "mode", "uid", "xattrs"} <= found, found  # the recorder records


def test_the_recorder_sees_a_field_a_changed_plan_would_read(monkeypatch: pytest.MonkeyPatch) -> None:
    real_why = restore_meta._why_not

    def why_not(entry: FileMeta, *rest: Any) -> list[str]:
        return [*real_why(entry, *rest), *(["big"] if entry.size > 2 else [])]
    monkeypatch.setattr(restore_meta, "_why_not", why_not)
    assert "size" in fields_plan_reads(monkeypatch) - PLAN_KEY_FIELDS


@pytest.mark.parametrize(("field", "other"), [
    ("mode", 0o4755), ("uid", 5), ("gid", 5), ("flags", 0x10),
    ("xattrs", [["security.capability", "AQ=="]]), ("kind", "symlink")])
def test_entries_apart_in_a_field_the_plan_reads_are_planned_apart(field: str, other: Any) -> None:
    # rdev is in the key too, but no entry the core makes has one (devices are Python's to make).
    from artifactkit import _native

    # A symlink has no content and no flags: null, as absent (a manifest giving them a value is refused).
    second = {"kind": "symlink", "mode": 0o777, "target": "a", "sha256": None, "size": None, "flags": None} \
        if field == "kind" else {field: other}
    data = body(doc(file_entry(path="a", uid=0, gid=0, flags=0), file_entry(**{"path": "b", "uid": 0, "gid": 0,
                                                                               "flags": 0, **second})))
    tree = _native.parse_tree(data, hashlib.sha256(data).hexdigest())
    assert len(tree.layout()[3]) == 2, f"entries apart in {field} share a representative"
    same = body(doc(file_entry(path="a"), file_entry(path="b")))
    assert len(_native.parse_tree(same, hashlib.sha256(same).hexdigest()).layout()[3]) == 1


def test_a_corrupt_blob_amid_a_batch_is_named_as_the_reference_names_it(
        plain_tree: tuple[Store, ArtifactRef, Path]) -> None:
    store, ref, dest = plain_tree
    victim = next(e for e in store.manifest(ref).entries if e.path == "d2/f30")
    assert victim.sha256 is not None
    put_blob(store, victim.sha256, b"not %d" % 30)
    errors = []
    for engine in ("python", "native"):
        with running_on(engine), pytest.raises(IntegrityError) as caught:
            store.download(ref, dest / engine)
        errors.append(caught.value)
    assert "'d2/f30'" in str(errors[0])
    same_error(errors[1], errors[0])


def test_bytes_of_another_digest_are_refused_as_the_reference_refuses_them() -> None:
    from artifactkit import _native
    from artifactkit.store.manifest_file import verified_entries

    data = body(doc())
    right, wrong = hashlib.sha256(data).hexdigest(), hashlib.sha256(b"other").hexdigest()
    assert len(_native.parse_tree(data, right)) == 2
    with pytest.raises(_native.NativeFailure) as declined:
        _native.parse_tree(data, wrong)
    assert declined.value.args[0] == "manifest_refused" and declined.value.args[2]["check"] == "digest"
    errors = []
    for engine in ("python", "native"):
        with running_on(engine), pytest.raises(IntegrityError) as caught:
            verified_entries(ArtifactRef("demo", 1, wrong), data, "m")
        errors.append(caught.value)
    assert "is corrupt: its bytes hash to" in str(errors[0])
    same_error(errors[1], errors[0])
    with running_on("native"):
        assert [e.path for e in verified_entries(ArtifactRef("demo", 1, right), data, "m")] == [".", "a"]


class _StopError(Exception):
    """What a progress callback raises to stop a download."""


def test_the_cores_create_reports_as_it_goes_and_a_raising_callback_stops_it(
        plain_tree: tuple[Store, ArtifactRef, Path]) -> None:
    store, ref, dest = plain_tree
    seen: list[Progress] = []
    with running_on("native"):
        store.download(ref, dest / "out", progress=seen.append)
    create = [p for p in seen if p.phase == "create"]
    # One report per directory's part (four directories of ten files, the root's link), in one call of the core.
    assert [p.entries for p in create] == [0, *sorted(p.entries for p in create[1:])] and len(create) == 6
    assert (create[-1].entries, create[-1].bytes) == (create[-1].entries_total, create[-1].bytes_total) == (41, 70)

    def stop_at_the_second(report: Progress) -> None:
        if report.phase == "create" and report.entries:
            raise _StopError(report.entries)
    with running_on("native"), pytest.raises(_StopError):
        store.download(ref, dest / "stopped", progress=stop_at_the_second)
    assert sorted(os.listdir(dest)) == ["out"], "nothing of the stopped download is left"

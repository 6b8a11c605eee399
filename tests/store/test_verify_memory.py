"""``verify`` and ``gc`` in memory that does not grow with the store (issue 52, item 2): a format-3 version is read a
tree object at a time, never as one listing; what the versions need is sorted on a temporary file, each blob checked
once; the listing of ``blobs/`` streams through that sort; a blob's users are read again only when it is wrong. A
hostile tree is refused by the object walk as a download's walk refuses it, without a loop."""

from __future__ import annotations

import collections
import hashlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from artifactkit import IntegrityError, Store
from artifactkit.store import sorted_runs, verify, versions
from artifactkit.store.needed_blobs import NeededBlobs
from artifactkit.store.sorted_runs import SortedRuns
from tests.support.deadline import deadline
from tests.support.hostile_store import remove_blob, replace_blob
from tests.support.tree_objects import (
    canonical_entries,
    canonical_index,
    directory_objects,
    object_doc,
    parts_of,
    put_object,
    with_object,
)


def _tree(src: Path, files: int, *, per_dir: int = 100) -> Path:
    for i in range(files):
        path = src / f"d{i // per_dir:04d}" / f"f{i:06d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"%d\n" % i)
    return src


def _no_whole_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way to a format-3 version's whole listing raises: the listing's walk and its assembly."""
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a whole listing of a format-3 version was built")
    monkeypatch.setattr(versions, "read_tree", refused)
    monkeypatch.setattr(versions, "listing_body", refused)
    monkeypatch.setattr(versions, "read_manifest", refused)


def test_verify_and_gc_never_build_a_format_3_versions_whole_listing(
        any_store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(fast_tmp / "src", 600)
    first = any_store.publish(src, "demo")
    (src / "d0000" / "f000000").write_bytes(b"changed\n")
    any_store.publish(src, "demo")
    first_objects = [directory_objects(any_store, first)[path] for path in (".", "d0000")]
    any_store.forget("demo", [1])
    _no_whole_listing(monkeypatch)
    with pytest.raises(AssertionError, match="whole listing"):  # the guard bites where a listing is built
        any_store.download("demo", fast_tmp / "out", version=2)
    only_first = {hashlib.sha256(b"0\n").hexdigest(), *first_objects}
    report = any_store.verify()
    assert report.ok and report.versions == 1 and report.blobs_checked == 607, report
    if any_store.root.startswith("s3://"):
        assert sorted(report.kept) == sorted(f"blobs/{name}" for name in only_first), report  # a bucket's grace
    else:
        assert sorted(report.orphaned) == sorted(f"blobs/{name}" for name in only_first), report
    assert sorted(any_store.gc(grace_s=0).removed_blobs) == sorted(only_first)
    assert any_store.verify().clean


def _peak_of_verify(store: Store) -> int:
    tracemalloc.start()
    try:
        report = store.verify()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        assert report.clean, report


def _growth(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How much more verify's peak of Python memory is at 6,000 files than at 1,000."""
    # Small runs, so that 1,000 entries already fill some, merged four at a time with small reads (a merge holds a
    # read per run, at most FAN_IN): what is left to grow is what grows with the entries.
    monkeypatch.setattr(sorted_runs, "RUN_BYTES", 16 << 10)
    monkeypatch.setattr(sorted_runs, "READ_BYTES", 4 << 10)
    monkeypatch.setattr(sorted_runs, "FAN_IN", 4)
    small, large = Store(fast_tmp / "small"), Store(fast_tmp / "large")
    small.publish(_tree(fast_tmp / "a", 1_000), "demo")
    large.publish(_tree(fast_tmp / "b", 6_000), "demo")
    return _peak_of_verify(large) - _peak_of_verify(small)


#: Before, every entry was a FileMeta and a user string held at once: 5,000 more entries were 5 MB more.
_FLAT = 512 << 10


def test_what_verify_holds_does_not_grow_with_the_number_of_entries(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grown = _growth(fast_tmp, monkeypatch)
    assert grown < _FLAT, f"verify held {grown:,} bytes more for 5,000 more entries"


def test_the_bound_sees_a_verify_that_keeps_what_each_entry_needs(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[str, str, int]] = []
    real = verify.version_needs

    def keeping(opened: Any, ref: Any) -> Iterator[tuple[str, str, int]]:
        for need in real(opened, ref):
            kept.append(need)
            yield need
    monkeypatch.setattr(verify, "version_needs", keeping)
    assert _growth(fast_tmp, monkeypatch) > _FLAT


def test_a_blob_found_wrong_names_its_users_from_a_second_walk_as_the_report_always_did(
        any_store: Store, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src", 300)
    (src / "d0002" / "same").write_bytes(b"0\n")  # one blob, two users in one version
    any_store.publish(src, "demo")
    any_store.publish(src, "other")
    blob = hashlib.sha256(b"0\n").hexdigest()
    remove_blob(any_store, blob)
    report = any_store.verify()
    assert report.missing == [f"blob {blob}; breaks demo@1, other@1 (needed by demo@1:d0000/f000000, "
                              "demo@1:d0002/same, other@1:d0000/f000000, other@1:d0002/same)"], report
    wrong, planted = hashlib.sha256(b"1\n").hexdigest(), hashlib.sha256(b"X\n").hexdigest()
    replace_blob(any_store, wrong, b"X\n")
    assert [item for item in any_store.verify().corrupt if wrong in item] == [
        f"blob {wrong}: content hashes to {planted}; breaks demo@1, other@1 (needed by demo@1:d0000/f000001, "
        "other@1:d0000/f000001)"]


@pytest.mark.parametrize("named", ["itself", "parent"])
def test_verify_refuses_a_tree_object_naming_itself_or_its_parent_without_a_loop(
        any_store: Store, fast_tmp: Path, named: str) -> None:
    any_store.publish(_tree(fast_tmp / "src", 50, per_dir=10), "demo")
    (fast_tmp / "src" / "d0001" / "sub").mkdir()
    second = any_store.publish(fast_tmp / "src", "demo")
    objects = directory_objects(any_store, second)
    doc = object_doc(any_store, objects["d0001"])
    target = objects["d0001" if named == "itself" else "."]
    looping = put_object(any_store, canonical_entries("d0001", doc["entries"], [("d0001/sub", target)]))
    forged = with_object(any_store, second, "d0001", looping, version=3)
    with deadline(60):
        report = any_store.verify()
    assert [item for item in report.corrupt if "demo@3" in item and target in item], report
    assert report.broken_versions == [f"demo@{forged.version}"]


@pytest.mark.parametrize(("change", "refusal"), [("swapped", "in path order"), ("dropped", "its tree holds"),
                                                 ("repeated", "not a canonical index")])
def test_verify_refuses_a_split_directory_whose_parts_are_out_of_order_missing_or_repeated(
        any_store: Store, fast_tmp: Path, change: str, refusal: str) -> None:
    src = fast_tmp / "src"
    (src / "big").mkdir(parents=True)
    for i in range(1100):
        (src / "big" / f"{i:05d}").write_bytes(b"")
    first = any_store.publish(src, "demo")
    parts = parts_of(any_store, directory_objects(any_store, first)["big"])
    changed = {"swapped": [parts[1], parts[0], *parts[2:]], "dropped": parts[:-1], "repeated": [parts[0], *parts]}
    index = put_object(any_store, canonical_index("big", changed[change]))
    with_object(any_store, first, "big", index, version=2)
    report = any_store.verify()
    assert [item for item in report.corrupt if "demo@2" in item and refusal in item], report
    assert report.broken_versions == ["demo@2"]


# --- the sort and the merge ----------------------------------------------------------------------------------

def test_sorted_runs_give_every_record_once_in_order_across_many_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorted_runs, "RUN_BYTES", 256)
    monkeypatch.setattr(sorted_runs, "READ_BYTES", 7)  # records cross every read's edge
    monkeypatch.setattr(sorted_runs, "FAN_IN", 3)  # merged in rounds
    records = [hashlib.sha256(b"%d" % (i % 500)).digest()[: 1 + i % 40] for i in range(3000)]
    runs = SortedRuns()
    for record in records:
        runs.add(record)
    assert list(runs) == sorted(set(records))
    runs.compact()
    assert list(runs) == sorted(set(records)) == list(runs)
    runs.close()


def test_needed_blobs_give_each_digest_once_with_every_size_recorded_and_the_names_none_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorted_runs, "RUN_BYTES", 512)
    digests = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(200)]
    needed = NeededBlobs()
    for digest in digests * 3:
        needed.add(digest, 5)
    needed.add(digests[7], 9)
    needed.finish()
    assert len(needed) == 200 and needed.bytes == 1000
    items = dict(needed.items())
    assert list(items) == sorted(digests) and items[digests[7]] == (5, 9) and items[digests[8]] == (5,)
    listed = [*digests[::2], "junk", "zz", hashlib.sha256(b"none").hexdigest()]
    unneeded = ["junk", "zz", hashlib.sha256(b"none").hexdigest()]
    assert list(needed.unneeded(reversed(listed))) == sorted(unneeded)
    assert list(needed.unneeded_in_order(sorted(listed), str, where="test")) == sorted(unneeded)
    needed.close()


def test_a_listing_out_of_key_order_is_refused_before_a_needed_blob_could_look_unneeded() -> None:
    needed = NeededBlobs()
    low, high = sorted(hashlib.sha256(b"%d" % i).hexdigest() for i in range(2))
    needed.add(low, 1)
    needed.finish()
    # In order, the merge finds `low` needed; out of order, the merge has passed it when it comes: it is refused.
    assert list(needed.unneeded_in_order([low, high], str, where="test")) == [high]
    with pytest.raises(IntegrityError, match="not in key order"):
        list(needed.unneeded_in_order([high, low], str, where="test"))
    needed.close()


def test_each_starts_only_a_few_calls_ahead_of_the_result_taken() -> None:
    pulled = collections.Counter[str]()

    def items() -> Iterator[int]:
        for item in range(1000):
            pulled["items"] += 1
            yield item
    opened: Any = SimpleNamespace(concurrency=3)
    results = versions.each(opened, lambda item: item * 2, items())
    assert [next(results) for _ in range(5)] == [0, 2, 4, 6, 8]
    assert pulled["items"] <= 5 + versions.AHEAD * 3  # Executor.map took all 1,000 before the first result
    assert list(results) == [item * 2 for item in range(5, 1000)]

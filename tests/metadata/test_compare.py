"""The shared assertion: every mismatch listed per path and field, diagnosed, at its stage."""

from __future__ import annotations

import pickle
from pathlib import Path

import attrs
import pytest

from artifactkit import FileMeta, MetadataMismatchError, Store, assert_metadata_equal, compare
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata import drift as dx
from tests.support import faulty_steps as faulty

ENTRY = FileMeta(path="a.txt", kind="file", mode=0o644, size=3, mtime_ns=1_500_000_000_123_456_789,
                 atime_ns=1_600_000_000_987_654_321, sha256="0" * 64)


def test_an_exact_tree_passes_and_compares_empty() -> None:
    assert compare([ENTRY], [ENTRY]) == []
    assert_metadata_equal([ENTRY], [ENTRY], stage="publish")


def test_the_message_names_path_field_values_delta_diagnosis_and_stage() -> None:
    truncated = attrs.evolve(ENTRY, atime_ns=1_600_000_000_000_000_000, mode=0o600)
    with pytest.raises(MetadataMismatchError) as info:
        assert_metadata_equal([ENTRY], [truncated], stage="download")
    message = str(info.value)
    assert "stage 'download'" in message and "a.txt" in message
    assert "atime_ns: expected 1600000000987654321, actual 1600000000000000000 (delta -987654321 ns): " \
           "second-truncated" in message
    assert "mode: expected 0o0644, actual 0o0600: mode-differs" in message
    assert isinstance(info.value, AssertionError)
    assert {m.diagnosis for m in info.value.mismatches} == {"second-truncated", "mode-differs"}
    assert all(m.stage == "download" for m in info.value.mismatches)


def test_compare_gives_the_classifier_the_actual_mtime_so_an_atime_copied_from_it_is_named() -> None:
    # restic and borg without --atime restore atime := mtime; a post-2038 mtime lies past ctime.
    future = attrs.evolve(ENTRY, mtime_ns=4_102_444_800_123_456_789)
    restored = attrs.evolve(future, atime_ns=future.mtime_ns, ctime_ns=1_790_000_000_000_000_000)
    assert [(m.field, m.diagnosis) for m in compare([future], [restored])] == [("atime_ns", dx.SET_TO_MTIME)]


def test_missing_unexpected_kind_and_content_are_named() -> None:
    other = FileMeta(path="b", kind="dir", mode=0o755, mtime_ns=1, atime_ns=1)
    found = compare([ENTRY, attrs.evolve(other, path="c")],
                    [attrs.evolve(ENTRY, sha256="1" * 64), other, attrs.evolve(other, path="c", kind="symlink")])
    assert [(m.path, m.diagnosis) for m in found] == [
        ("a.txt", dx.CONTENT_DIFFERS), ("b", dx.UNEXPECTED), ("c", dx.KIND_DIFFERS)]


def test_the_error_pickles_with_its_mismatches() -> None:
    with pytest.raises(MetadataMismatchError) as info:
        assert_metadata_equal([ENTRY], [attrs.evolve(ENTRY, atime_ns=0)], stage="publish")
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value) and clone.mismatches == info.value.mismatches


def _published(tmp: Path, corpus: str = "edge-times") -> tuple[list[FileMeta], Store, object]:
    supplied = materialize(corpus, tmp / "src")
    store = Store(tmp / "store")
    return supplied, store, store.publish(tmp / "src", "demo")


def test_a_capture_that_truncates_atime_is_caught_at_the_publish_stage(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, reference_engine: None) -> None:
    # The broken capture is the reference scan's, patched: the point is the shared assertion's diagnosis of
    # what such a capture records, on either engine's manifest alike. The native scan's every field is held
    # to the reference's in tests/native/test_scan_differential.py.
    from artifactkit.engine.reference import scan

    real = scan.meta_from_stat

    def truncating(relpath: str, st: object, **kw: object) -> FileMeta:
        meta = real(relpath, st, **kw)  # type: ignore[arg-type]
        return attrs.evolve(meta, atime_ns=(meta.atime_ns // 10**9) * 10**9)

    monkeypatch.setattr(scan, "meta_from_stat", truncating)
    supplied, store, ref = _published(fast_tmp)
    with pytest.raises(MetadataMismatchError) as info:
        assert_metadata_equal(supplied, store.manifest(ref).entries, stage="publish")
    assert {m.diagnosis for m in info.value.mismatches} == {dx.SECOND_TRUNCATED}
    assert {m.field for m in info.value.mismatches} == {"atime_ns"}


@pytest.mark.parametrize(("restore", "diagnosis"), [
    (faulty.restore_omitting_atime, dx.OMITTED),
    (faulty.restore_truncating_to_seconds, dx.SECOND_TRUNCATED),
    (faulty.restore_through_float, dx.FLOAT_ROUNDED),
])
def test_a_faulty_restore_is_caught_at_the_download_stage_with_its_diagnosis(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, restore: object, diagnosis: str) -> None:
    import artifactkit.store.store as store_module

    supplied, store, ref = _published(fast_tmp, "basic")
    assert_metadata_equal(supplied, store.manifest(ref).entries, stage="publish")  # publish was fine
    monkeypatch.setattr(store_module, "restore_tree", restore)
    store.download(ref, fast_tmp / "out")
    with pytest.raises(MetadataMismatchError) as info:
        assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")
    atime = [m for m in info.value.mismatches if m.field == "atime_ns"]
    assert len(atime) == len(supplied), str(info.value)
    for mismatch in atime:
        # A value like X.000000009 s that float rounding turns into X.0 is *also* a whole-second
        # truncation: the two integers cannot tell them apart, and the classifier names the coarser.
        ambiguous = isinstance(mismatch.actual, int) and mismatch.actual % 10**9 == 0
        assert mismatch.diagnosis == diagnosis or (ambiguous and mismatch.diagnosis == dx.SECOND_TRUNCATED), \
            str(info.value)
    assert diagnosis in {m.diagnosis for m in atime}


def test_the_real_store_passes_both_stages_on_the_same_tree(fast_tmp: Path) -> None:
    supplied, store, ref = _published(fast_tmp, "basic")
    assert_metadata_equal(supplied, store.manifest(ref).entries, stage="publish")
    store.download(ref, fast_tmp / "out")
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage="download")

"""A filesystem that cannot hold a value makes the restore fail loudly, never truncate silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import Store, TimestampNotRepresentable, assert_metadata_equal
from artifactkit.conformance.corpus import materialize, parse_tree
from artifactkit.engine.reference.scan import capture_tree

WHOLE_SECONDS = parse_tree("whole-seconds", {
    "entry": [
        {"path": ".", "kind": "dir", "mode": 0o755,
         "mtime_ns": 1_500_000_000 * 10**9, "atime_ns": 1_500_000_001 * 10**9},
        {"path": "a", "kind": "file", "mode": 0o640, "size": 10, "seed": 1,
         "mtime_ns": 1_400_000_000 * 10**9, "atime_ns": 1_400_000_002 * 10**9},
        {"path": "old", "kind": "file", "mode": 0o600, "size": 1, "seed": 2,
         "mtime_ns": -(10**9) * 86400 * 365, "atime_ns": -(10**9)},
    ],
})


def test_whole_second_values_round_trip_exactly_on_ext4_with_128_byte_inodes(
        ext4_whole_seconds: Path, fast_tmp: Path) -> None:
    supplied = materialize(WHOLE_SECONDS, fast_tmp / "src")
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", "coarse")
    dest = ext4_whole_seconds / "ok"
    store.download(ref, dest)
    assert_metadata_equal(supplied, capture_tree(dest), stage="download")


@pytest.mark.parametrize(("corpus", "why"), [
    ("basic", "sub-second"),          # every value has ns digits
    ("edge-times", "post-2038"),      # plus values past the 32-bit limit
])
def test_a_value_ext4_with_128_byte_inodes_cannot_hold_raises_and_leaves_nothing(
        ext4_whole_seconds: Path, fast_tmp: Path, corpus: str, why: str) -> None:
    materialize(corpus, fast_tmp / "src")
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", corpus)
    parent = ext4_whole_seconds / f"refuse-{corpus}"
    parent.mkdir()
    with pytest.raises(TimestampNotRepresentable) as info:
        store.download(ref, parent / "dest")
    err = info.value
    assert err.expected != err.actual and err.path and err.field in ("mtime_ns", "atime_ns")
    assert str(err.expected) in str(err) and str(err.actual) in str(err)
    assert os.listdir(parent) == [], "no partial destination, no staging left"
    del why


def test_a_post_2038_value_is_clamped_by_the_kernel_and_the_restore_reports_it(
        ext4_whole_seconds: Path) -> None:
    from artifactkit.metadata.times import set_times_exact

    target = ext4_whole_seconds / "clamp-probe"
    target.write_bytes(b"")
    with pytest.raises(TimestampNotRepresentable) as info:
        set_times_exact(str(target), atime_ns=10**9, mtime_ns=4_102_444_800 * 10**9)
    assert info.value.actual == (2**31 - 1) * 10**9  # silently clamped to S32_MAX by the kernel


def test_a_time_moved_by_a_read_after_utime_is_a_mismatch_not_an_unrepresentable_value(tmpfs_strict: Path) -> None:
    from artifactkit import MetadataMismatchError
    from artifactkit.metadata.times import check_times_stored

    target = tmpfs_strict / "moved-by-read"
    target.write_bytes(b"data")
    historical = 1_500_000_000_123_456_789
    os.utime(target, ns=(historical, historical))
    target.read_bytes()  # strictatime: this read moves atime, as a competing reader's would
    st = os.stat(target)
    with pytest.raises(MetadataMismatchError) as info:
        check_times_stored(str(target), st, atime_ns=historical, mtime_ns=historical)
    assert [m.diagnosis for m in info.value.mismatches] == ["advanced-by-read"]

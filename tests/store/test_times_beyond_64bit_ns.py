"""Times past 2262 and before 1677: outside 64-bit nanoseconds, inside the kernel's 64-bit seconds.

tmpfs and btrfs keep any ``time64_t``, xfs with bigtime 1901-2486, ext4's 256-byte inodes 1901-2446 (xfstests
generic/634 and /635 test those ends). The store keeps every one of them, on both engines, on each of these
filesystems: a publish records the value exactly and a download sets it back exactly.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from artifactkit import Store, TimestampNotRepresentable, assert_metadata_equal
from artifactkit._fsutil import remove_tree
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.manifest.encode import check_representable
from artifactkit.metadata.model import FileMeta
from tests.support.capability import require_loop_devices, require_tool
from tests.support.fs_matrix import BY_NAME, NS_PER_S, FsSpec, build
from tests.support.mounts import Mounts

I64 = 2**63
#: The kernel's range: a signed 64-bit second and 0..999,999,999 ns (what ``timespec64`` holds).
KERNEL_LOW, KERNEL_HIGH = -I64 * NS_PER_S, I64 * NS_PER_S
YEAR_2400 = int(datetime(2400, 2, 29, tzinfo=UTC).timestamp()) * NS_PER_S + 123_456_789
YEAR_1600 = int(datetime(1600, 2, 29, tzinfo=UTC).timestamp()) * NS_PER_S + 987_654_321
#: Each a time no 64-bit ns count holds, and the ends of the kernel's range that a filesystem stores exactly
#: (the first and the last second only at 0 ns: the kernel clamps their nanoseconds away, as seen on tmpfs).
FAR_TIMES = (I64, I64 + 1, YEAR_2400, -I64 - 1, YEAR_1600, (I64 - 1) * NS_PER_S, KERNEL_LOW)
FILESYSTEMS = ("tmpfs-relatime", "ext4-relatime", "xfs", "btrfs")


@pytest.fixture(params=FILESYSTEMS)
def spec(request: pytest.FixtureRequest) -> FsSpec:
    return BY_NAME[request.param]


@pytest.fixture
def work(spec: FsSpec, mounts: Mounts) -> Iterator[Path]:
    if spec.fs_type != "tmpfs":
        require_loop_devices()
    if spec.tool is not None:
        require_tool(*spec.tool)
    path = Path(tempfile.mkdtemp(prefix="far-", dir=build(spec, mounts)))
    yield path
    remove_tree(path)


def far_tree(root: Path, times: list[int]) -> None:
    """Files, a directory, a symlink and the root, each time of ``times`` an mtime of one and an atime of another."""
    (root / "sub").mkdir(parents=True)
    paths = []
    for at in range(len(times)):
        (root / "sub" / f"f{at}").write_bytes(b"far %d\n" % at)
        paths.append(f"sub/f{at}")
    os.symlink("sub/f0", root / "link")
    for at, path in enumerate([*paths, "link", "sub", "."]):
        os.utime(root / path, ns=(times[(at + 1) % len(times)], times[at % len(times)]), follow_symlinks=False)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_times_past_2262_and_before_1677_publish_and_download_exactly_where_the_filesystem_holds_them(
        spec: FsSpec, work: Path, engine: str, use_engine: Callable[[str], None]) -> None:
    use_engine(engine)
    times = [value for value in FAR_TIMES if spec.holds(value)]
    assert any(value >= I64 for value in times), f"{spec.name} holds no time past 2262?"
    far_tree(work / "src", times)
    supplied = capture_tree(work / "src")
    assert {e.mtime_ns for e in supplied} == {e.atime_ns for e in supplied} == set(times)
    store = Store(work / "store")
    ref = store.publish(work / "src", "far")
    assert_metadata_equal(supplied, store.manifest(ref).entries, stage="publish")
    store.download(ref, work / "out")
    assert_metadata_equal(supplied, capture_tree(work / "out"), stage="download")
    again = store.publish(work / "src", "far")  # the second publish: what a stat cache kept, if it kept it
    assert again.digest == ref.digest


@pytest.mark.parametrize(("field", "value"), [("mtime_ns", KERNEL_HIGH), ("atime_ns", KERNEL_LOW - 1)])
def test_a_time_outside_64_bit_seconds_is_refused_by_name_before_publishing(field: str, value: int) -> None:
    entry = attrs.evolve(FileMeta(path="a", kind="file", mode=0o644, mtime_ns=0, atime_ns=0, size=0,
                                  sha256="0" * 64), **{field: value})
    check_representable([FileMeta(path="b", kind="dir", mode=0o755, mtime_ns=KERNEL_HIGH - 1,
                                  atime_ns=KERNEL_LOW)], where="edges")
    with pytest.raises(TimestampNotRepresentable, match=rf"'a' has {field}={value}, outside the manifest's "
                                                        r"range \[-2\*\*63 s, 2\*\*63 s\)") as caught:
        check_representable([entry], where="src")
    assert caught.value.context == {"path": "a", "field": field, "actual": value}

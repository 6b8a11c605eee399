"""The real filesystem matrix: probe, strict fixture and store on every filesystem a user may run.

Each filesystem of ``tests/fs_matrix.MATRIX`` is built once per session (shared mounts, sparse
images on tmpfs). Expectations come from that table — what the kernel sources say each
filesystem is, corrected by observation where they differed — never from the probe's earlier
output. The last tests prove that no mount or loop device outlives a session, even one that
fails, is interrupted or is killed.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit._fsutil import remove_tree
from artifactkit.conformance.corpus import corpus_names, needs_root
from artifactkit.errors import IsolationError
from artifactkit.isolation.probe import HISTORICAL_NS, probe_atime, read_moves_atime, write_file
from artifactkit.isolation.tree import private_noatime_tree
from artifactkit.metadata.flags import get_flags, set_noatime_flag
from tests.support.capability import require_loop_devices, require_tool, skip_or_fail
from tests.support.fs_matrix import MATRIX, NS_PER_S, FsSpec, build, round_trip
from tests.support.mounts import Mounts, loops_under, mounts_under, sweep_stale

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=MATRIX, ids=lambda spec: spec.name)
def spec(request: pytest.FixtureRequest) -> FsSpec:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def work(spec: FsSpec, mounts: Mounts) -> Iterator[Path]:
    """A fresh directory on the session's mount of ``spec``, removed after the test."""
    if spec.fs_type not in ("tmpfs", "ramfs"):
        require_loop_devices()
    if spec.tool is not None:
        require_tool(*spec.tool)
    path = Path(tempfile.mkdtemp(prefix="work-", dir=build(spec, mounts)))
    yield path
    remove_tree(path)  # a corpus tree may hold a 0555 directory: a normal user must unlock it first


def test_the_probe_reports_what_the_filesystem_really_is(spec: FsSpec, work: Path, mounts: Mounts) -> None:
    doc = probe_atime(work).to_json()
    assert {key: doc[key] for key in spec.expected_probe()} == spec.expected_probe()
    # /proc shows relatime and noatime by name; strictatime is the absence of both.
    shown = {"relatime", "noatime"} & set(doc["mount_options"])
    assert shown == ({spec.policy} - {"strictatime"})
    # Evidence is sanitized: overlay's lowerdir=/upperdir=/workdir= would otherwise carry our paths.
    assert str(mounts.base) not in json.dumps(doc)


def test_the_flag_is_inherited_and_effective_exactly_as_the_kernel_sources_say(spec: FsSpec, work: Path) -> None:
    tree = work / "tree"
    tree.mkdir()
    result = set_noatime_flag(tree, private_root=tree)
    if spec.flag == "unsupported":
        assert (result.status, result.errno) == ("unsupported", errno.ENOTTY)
        return
    assert result.noatime
    (tree / "dir").mkdir()
    write_file(str(tree / "file"))
    assert [get_flags(tree / name).noatime for name in ("dir", "file")] == [spec.inherited] * 2
    # Effectiveness is about an inode that *carries* the flag, whether or not it inherited it.
    set_noatime_flag(tree / "file", private_root=tree)
    write_file(str(work / "control"))
    moved = read_moves_atime(str(tree / "file"), HISTORICAL_NS), read_moves_atime(str(work / "control"), HISTORICAL_NS)
    assert moved == (False, spec.policy != "noatime")


def test_the_strict_fixture_flags_the_tree_needs_no_flag_or_refuses_as_the_filesystem_requires(
        spec: FsSpec, work: Path) -> None:
    if not spec.fixture.startswith("IsolationError"):
        with private_noatime_tree(work) as tree:
            assert tree.mode == spec.fixture and tree.probe.fs_type == spec.fs_type
            assert get_flags(tree.path).noatime == (spec.fixture == "flag")
        assert os.listdir(work) == []
        return
    with pytest.raises(IsolationError, match=f"{spec.fs_type}.*remedy: run on a noatime test filesystem") as info:
        private_noatime_tree(work)
    assert f"IsolationError:{info.value.context['failed']}" == spec.fixture
    assert os.listdir(work) == [], "a refusal leaves nothing behind"


@pytest.mark.parametrize("corpus", corpus_names())
def test_every_corpus_tree_round_trips_exactly_or_is_refused_where_the_filesystem_cannot_hold_it(
        spec: FsSpec, work: Path, corpus: str, fast_tmp: Path) -> None:
    why = needs_root(corpus)
    if why:
        skip_or_fail(f"corpus tree {corpus!r}: {why} (a mode-000 file, foreign owners, privileged xattrs or an "
                     "ACL naming another user's id, which a user namespace mapping one id cannot hold)")
    assert round_trip(corpus, work, fast_tmp) == spec.round_trip_outcome(corpus)


def test_times_are_kept_up_to_the_range_edges_and_clamped_silently_beyond_them(spec: FsSpec, work: Path) -> None:
    path = str(work / "f")
    write_file(path)

    def stored(value_ns: int) -> int:
        os.utime(path, ns=(value_ns, value_ns))  # no error: since Linux 5.4 the kernel clamps instead
        return os.lstat(path).st_mtime_ns

    if spec.range_s is None:  # 64-bit seconds: nothing a utime can exceed, so test far out both ways
        assert [stored(s * NS_PER_S) for s in (-(2**62), 2**62)] == [-(2**62) * NS_PER_S, 2**62 * NS_PER_S]
        return
    low, high = spec.range_s
    assert [stored(low * NS_PER_S), stored(high * NS_PER_S)] == [low * NS_PER_S, high * NS_PER_S]
    # Clamping keeps the edge's whole second and drops the ns (fs/inode.c timestamp_truncate).
    beyond = [stored((low - 1) * NS_PER_S - 1), stored((high + 1) * NS_PER_S + spec.granularity_ns)]
    assert beyond == [low * NS_PER_S, high * NS_PER_S]


# -- no leaks -------------------------------------------------------------------------------------

INNER_CONFTEST = """
import pytest
from tests.support import fs_matrix
from tests.support.mounts import Mounts

@pytest.fixture(scope="session")
def matrix():
    with Mounts() as mounts:
        with open("base.txt", "w") as handle:
            handle.write(str(mounts.base))
        yield fs_matrix.build_all(mounts)
"""

INNER_FAILING = """
HELD = []

def test_fails_with_a_file_held_open_inside_every_mount(matrix):
    # Open files keep every mount busy at teardown: a plain umount would fail with EBUSY.
    HELD.extend(open(path / "held", "w") for path in matrix.values())
    assert False, "deliberate failure inside the mounts"
"""

INNER_INTERRUPTED = """
def test_is_interrupted_inside_the_mounts(matrix):
    (matrix["xfs"] / "partial").write_bytes(b"x")
    raise KeyboardInterrupt
"""


def _assert_nothing_left(base: str) -> None:
    with open("/proc/mounts", encoding="utf-8") as handle:
        assert [line for line in handle if base in line] == []
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    assert [line for line in listed.splitlines() if base in line] == []
    assert (mounts_under(base), loops_under(base), os.path.exists(base)) == ([], [], False)


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    require_loop_devices()  # the whole matrix, ext4 images included
    for spec in MATRIX:
        if spec.tool is not None:
            require_tool(*spec.tool)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(INNER_CONFTEST)
    return pytester


def test_a_session_failing_inside_busy_mounts_leaves_no_mount_or_loop_device(inner: pytest.Pytester) -> None:
    inner.makepyfile(INNER_FAILING)
    result = inner.runpytest_subprocess("-p", "no:artifactkit", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*deliberate failure inside the mounts*"])
    _assert_nothing_left((inner.path / "base.txt").read_text())


def test_an_interrupted_session_leaves_no_mount_or_loop_device(inner: pytest.Pytester) -> None:
    inner.makepyfile(INNER_INTERRUPTED)
    result = inner.runpytest_subprocess("-p", "no:artifactkit", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    _assert_nothing_left((inner.path / "base.txt").read_text())


KILLED = """
import signal, sys
from tests.support import fs_matrix
from tests.support.mounts import Mounts

mounts = Mounts(sys.argv[1])
fs_matrix.build_all(mounts)
print(mounts.base, flush=True)
signal.pause()  # until SIGKILL: no teardown, no atexit
"""


def test_a_killed_session_is_swept_by_the_next_one(inner: pytest.Pytester) -> None:
    # A private root: sessions on other xdist workers sweep /dev/shm and must not race this one.
    root = tempfile.mkdtemp(prefix="artifactkit-sweep-test-", dir="/dev/shm")
    try:
        child = subprocess.Popen([sys.executable, "-c", KILLED, root], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        base = child.stdout.readline().strip()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert len(mounts_under(base)) == len(MATRIX) + 1  # overlay also mounts its own ext4
        assert loops_under(base), "the kill really left loop devices behind"
        assert sweep_stale(root) == [Path(base).name]
        _assert_nothing_left(base)
    finally:
        sweep_stale(root)
        os.rmdir(root)

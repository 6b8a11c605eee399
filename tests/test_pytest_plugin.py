"""The plugin seen from an outside project: only ``artifactkit`` installed, no conftest of ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifactkit.metadata.flags import FlagResult, get_flags
from tests.support.mounts import Mounts

pytest_plugins = ["pytester"]

OUTSIDE_PROJECT = '''
import os

from artifactkit import capture
from artifactkit.metadata.flags import get_flags

OLD = 1_000_000_000_123_456_789


def test_exact_atime_holds_under_competing_readers(noatime_tree, artifact_store, assert_metadata,
                                                   competing_readers):
    src = noatime_tree / "src"
    src.mkdir()
    (src / "f").write_bytes(b"payload")
    os.utime(src / "f", ns=(OLD, OLD + 5))
    os.utime(src, ns=(OLD + 7, OLD + 9))
    expected = [capture(src, root=src), capture(src / "f", root=src)]
    assert [m.atime_ns for m in expected] == [OLD + 7, OLD]
    readers = competing_readers(noatime_tree, n=4)
    readers.wait_reads(200)
    ref = artifact_store.publish(src, "outside")
    assert_metadata(expected, artifact_store.manifest(ref).entries, stage="publish")
    dest = noatime_tree / "dest"
    artifact_store.download(ref, dest)
    readers.wait_reads(readers.reads + 200)
    assert_metadata(expected, [capture(dest, root=dest), capture(dest / "f", root=dest)], stage="download")
    assert readers.reads >= 400


def test_the_flag_is_set_exactly_when_reads_would_move_atime(noatime_tree, atime_probe):
    assert get_flags(noatime_tree).noatime == (os.environ["EXPECT_FLAG"] == "1")
    assert atime_probe.atime_policy == os.environ["EXPECT_POLICY"]
'''


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, flag: bool, policy: str) -> None:
    pytester.makepyfile(test_outside=OUTSIDE_PROJECT)
    monkeypatch.setenv("EXPECT_FLAG", "1" if flag else "0")
    monkeypatch.setenv("EXPECT_POLICY", policy)
    monkeypatch.delenv("ARTIFACTKIT_BASE", raising=False)


def _ancestor_flags(path: Path) -> dict[Path, FlagResult]:
    return {p: get_flags(p) for p in (path, *path.parents)}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_strictatime_base_passes_with_the_flag_set(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                   tmpfs_strict: Path, workers: list[str]) -> None:
    _project(pytester, monkeypatch, flag=True, policy="strictatime")
    before = _ancestor_flags(tmpfs_strict)
    result = pytester.runpytest(f"--artifactkit-base={tmpfs_strict}", *workers)
    result.assert_outcomes(passed=2)
    if not workers:  # xdist workers print no header; the controller does
        result.stdout.fnmatch_lines([
            "artifactkit: base * (--artifactkit-base): fs=tmpfs atime=strictatime "
            "FS_NOATIME_FL=supported, inherited time_range 64-bit seconds -> isolation flag*"])
    assert _ancestor_flags(tmpfs_strict) == before
    assert list(tmpfs_strict.glob("artifactkit-*")) == []  # every private tree removed


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_noatime_base_passes_without_the_flag(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                              mounts: Mounts, workers: list[str]) -> None:
    base = mounts.tmpfs("noatime")
    _project(pytester, monkeypatch, flag=False, policy="noatime")
    result = pytester.runpytest(f"--artifactkit-base={base}", *workers)
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_ramfs_base_is_an_error_naming_the_remedy_not_a_skip(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               mounts: Mounts, workers: list[str]) -> None:
    base = mounts.ramfs()
    _project(pytester, monkeypatch, flag=True, policy="relatime")
    result = pytester.runpytest(f"--artifactkit-base={base}", "-rE", *workers)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "*IsolationError*ramfs*FS_NOATIME_FL is unsupported*remedy: run on a noatime test filesystem, "
        "or pass --artifactkit-base=PATH on one*"])
    assert "skipped" not in result.stdout.str()


def test_the_base_can_come_from_the_ini_file(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                             tmpfs_strict: Path) -> None:
    _project(pytester, monkeypatch, flag=True, policy="strictatime")
    pytester.makeini(f"[pytest]\nartifactkit_base = {tmpfs_strict}\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"artifactkit: base {tmpfs_strict} (ini artifactkit_base): fs=tmpfs*"])


def test_the_command_line_beats_the_environment_and_the_ini(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            mounts: Mounts, tmpfs_strict: Path) -> None:
    _project(pytester, monkeypatch, flag=False, policy="noatime")
    pytester.makeini(f"[pytest]\nartifactkit_base = {mounts.ramfs()}\n")
    monkeypatch.setenv("ARTIFACTKIT_BASE", str(tmpfs_strict))
    noatime = mounts.tmpfs("noatime")
    result = pytester.runpytest(f"--artifactkit-base={noatime}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["artifactkit: base * (--artifactkit-base): fs=tmpfs atime=noatime*"])


def test_every_fixture_is_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fixtures")
    result.stdout.fnmatch_lines([
        "atime_probe *session scope*", "*what the base filesystem does to atime*",
        "noatime_tree*", "*reads provably do not move atime*",
        "artifact_store*", "*Store rooted inside*",
        "assert_metadata*", "*The shared assertion*",
        "competing_readers*", "*stopped and joined at teardown*",
    ], consecutive=False)


def test_dash_p_no_artifactkit_disables_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_uses_it(noatime_tree):\n    pass\n")
    result = pytester.runpytest("-p", "no:artifactkit")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'noatime_tree' not found*"])
    assert "artifactkit: base" not in result.stdout.str()


def test_a_fake_filesystem_makes_the_fixture_error(pytester: pytest.Pytester, fast_tmp: Path) -> None:
    pytester.makepyfile("def test_fake(fs, noatime_tree):\n    pass\n")
    result = pytester.runpytest(f"--artifactkit-base={fast_tmp}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*IsolationError*fake*pyfakefs*remedy*"])


def test_a_base_that_does_not_exist_yet_is_created(pytester: pytest.Pytester, fast_tmp: Path) -> None:
    pytester.makepyfile("def test_uses_it(noatime_tree):\n    assert noatime_tree.is_dir()\n")
    base = fast_tmp / "not" / "yet" / "created"
    result = pytester.runpytest(f"--artifactkit-base={base}")
    result.assert_outcomes(passed=1)
    assert base.is_dir()


def test_a_base_that_cannot_be_made_names_what_to_change_not_the_option_already_passed(
        pytester: pytest.Pytester, fast_tmp: Path) -> None:
    (fast_tmp / "file").write_text("in the way")
    pytester.makepyfile("def test_uses_it(noatime_tree):\n    pass\n")
    result = pytester.runpytest(f"--artifactkit-base={fast_tmp / 'file' / 'below'}", "-rE")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*remedy: point --artifactkit-base at an existing writable directory*"])
    assert "or pass --artifactkit-base" not in result.stdout.str()

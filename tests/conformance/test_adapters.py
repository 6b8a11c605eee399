"""Named adapters pin what each real store keeps: a new tool version that changes a verdict is a diff.

Each adapter runs once over the small ``edge-times`` tree (pre-1970, post-2038, one-ns, setuid, sticky,
a link with its own times) from a strictatime tmpfs. The pinned verdicts are the failed checks and,
per failed check, every diagnosis seen. A missing tool skips with the package to install (a failure
in CI, which installs them all).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance import adapters
from artifactkit.conformance import checks as conformance
from artifactkit.conformance.copiers import resolve_copier
from artifactkit.errors import ToolFailedError, ToolMissingError
from tests.support.capability import require_fuse, skip_or_fail

SET, OMIT, CLAMP = "set-to-mtime", "omitted", "clamped"
MODE, READ = "mode-differs", "advanced-by-read"
KIND, MISSING, READ_FIRST, WRAP = "kind-differs", "missing", "read-before-recorded", "wrapped"
HUNDRED = "100ns-truncated"

#: adapter -> {failed check: every diagnosis among its failures} on edge-times (tools of Debian 12,
#: dvc 3.67, mlflow-skinny 3.17, Python 3.11). Read as findings in docs/real-stores.md.
PINNED: dict[str, dict[str, set[str]]] = {
    "restic": {"mode": {MODE}, "atime_ns": {SET}, "dir_times": {OMIT, SET}, "symlink_times": {SET}},
    "borg": {"mtime_ns": {CLAMP}, "atime_ns": {CLAMP, SET}, "dir_times": {OMIT, SET}, "symlink_times": {SET}},
    "borg-atime": {"mtime_ns": {CLAMP}, "atime_ns": {CLAMP}, "dir_times": {OMIT}},
    # rclone skips links (a kind of entry it does not copy): each fails what the link carried (issue 25).
    "rclone": {"content": {MISSING}, "mode": {MODE, MISSING}, "special_bits": {MODE}, "atime_ns": {SET},
               "dir_times": {OMIT}, "symlink_times": {MISSING}, "owner": {MISSING},
               "source_untouched": {READ}},
    # Issue 25, on a destination where reads move atime: rclone -M reads links back after setting their
    # times (advanced-by-read; stat by hand: the link's atime past its ctime, its mtime exact), and each
    # file's atime is no longer the source's value (omitted).
    "rclone-metadata": {"mode": {MODE}, "special_bits": {MODE}, "atime_ns": {OMIT}, "dir_times": {OMIT},
                        "symlink_times": {READ}, "source_untouched": {READ}},
    "zip": {"special_bits": {MODE}, "mtime_ns": {CLAMP, "second-truncated"},
            "atime_ns": {CLAMP, "second-truncated"}, "dir_times": {OMIT, "second-truncated"},
            "symlink_times": {OMIT}, "source_untouched": {READ}},
    "zipfile": {"content": {KIND}, "mode": {MODE, KIND}, "special_bits": {MODE}, "mtime_ns": {OMIT},
                "atime_ns": {OMIT}, "dir_times": {OMIT}, "symlink_times": {KIND}, "source_untouched": {READ}},
    # One rule per tree (issue 25): a float mtime and atime := that mtime. one-ns.txt's ...000000001 read as
    # second-truncated and equal-times.txt's atime as float-rounded by coincidence.
    "tarfile": {"mtime_ns": {"float-rounded"}, "atime_ns": {SET}, "dir_times": {"float-rounded", SET},
                "symlink_times": {OMIT},
                "source_untouched": {READ}},
    "tar-posix": {},
    "bindfs": {"source_untouched": {READ}},  # cp -a's own read; through FUSE both ways, nothing else lost
    # dvc and mlflow store a symlink as a regular file (checked by hand with lstat on the output): since
    # issue 25 the changed kind also fails the link's mode and times instead of ending its comparison.
    "dvc": {"content": {"kind-differs"}, "mode": {MODE, "kind-differs"}, "special_bits": {MODE},
            "mtime_ns": {OMIT}, "atime_ns": {OMIT}, "dir_times": {OMIT}, "symlink_times": {"kind-differs"},
            "source_untouched": {READ}},
    # Issue 25's adapters, each checked by hand on a shell-built edge-times (stat, getfattr, lsattr):
    # bsdtar keeps every time to the ns, xattrs and flags; its root is the extraction's mkdir; it reads the
    # source plainly.
    "bsdtar": {"dir_times": {OMIT}, "source_untouched": {READ}},
    # cpio newc: unsigned 32-bit whole seconds (1966 -> 2102), atime := mtime, links get the copy's times;
    # --reset-access-time writes the source's atime *and mtime* back truncated to seconds.
    "cpio": {"mtime_ns": {"second-truncated", WRAP}, "atime_ns": {SET},
             "dir_times": {OMIT, "second-truncated", SET}, "symlink_times": {OMIT},
             "source_untouched": {READ, "second-truncated"}},
    # pax ustar: whole seconds from 0 (1966 -> 1970), atime := mtime, -t leaves the source as it was.
    "pax": {"mtime_ns": {CLAMP, "second-truncated"}, "atime_ns": {CLAMP, SET},
            "dir_times": {"second-truncated", SET}, "symlink_times": {"second-truncated", SET}},
    # squashfs: one unsigned 32-bit mtime per inode (1966 -> 2102), atime := mtime; mksquashfs reads plainly.
    "squashfs": {"mtime_ns": {"second-truncated", WRAP}, "atime_ns": {SET},
                 "dir_times": {"second-truncated", SET}, "symlink_times": {"second-truncated", SET},
                 "source_untouched": {READ}},
    # 7-Zip: FILETIME floors every time to 100 ns (one-ns.txt's ...000000001 to a whole second: still the
    # same floor); setuid, setgid, sticky and a directory's group/other write are lost; its root is its own.
    "7z": {"mode": {MODE}, "special_bits": {MODE}, "mtime_ns": {HUNDRED}, "atime_ns": {HUNDRED},
           "dir_times": {HUNDRED, OMIT}, "symlink_times": {HUNDRED}, "source_untouched": {READ}},
    "mlflow": {"content": {"kind-differs"}, "mode": {MODE, "kind-differs"}, "special_bits": {MODE},
               "atime_ns": {OMIT}, "dir_times": {OMIT}, "symlink_times": {"kind-differs"}, "source_untouched": {READ}},
}


#: (adapter, check) -> the name a clock tick can give a tie instead of the pinned one. mlflow's two ``copy2`` hops
#: of edge-times' small files can all land in one tick of tmpfs's clock (1 run in 4 or 8 on an idle machine):
#: then every file's atime is also the source's moved value, no entry shows ``omitted`` alone, and the tie is
#: named ``read-before-recorded``, its rivals reported with it. Allowed only as a tie, never named alone.
TICK_TIES: dict[tuple[str, str], set[str]] = {("mlflow", "atime_ns"): {READ_FIRST}}


#: Adapters whose verdicts are pinned in a module of their own, with the server they need.
PINNED_ELSEWHERE = {"rclone-s3-metadata": "test_adapter_rclone_s3.py"}


#: What an adapter needs besides its tool, probed by doing it once.
NEEDS = {"bindfs": require_fuse}


def _require_adapter(name: str) -> None:
    NEEDS.get(name, lambda: None)()
    try:
        adapters.version(name)
    except ToolMissingError as err:
        skip_or_fail(f"the {name} adapter's tool is missing: {err}")


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_adapter_fails_exactly_its_pinned_checks_with_its_pinned_diagnoses(name: str, tmpfs_strict: Path) -> None:
    _require_adapter(name)
    report = conformance.check(name, corpus="edge-times", base=tmpfs_strict)
    seen = {item.check: {f.diagnosis for f in item.failures} for item in report.checks if item.passed is False}
    for (adapter, check), tie in TICK_TIES.items():
        if adapter == name and seen.get(check) == tie:
            tied = [f for item in report.checks if item.check == check for f in item.failures]
            assert all(f.rivals for f in tied), f"{check} named {tie} alone: {tied}"
            seen[check] = PINNED[name][check]
    assert seen == PINNED[name]
    # What edge-times holds nothing of has no verdict (issue 50), whatever the adapter did.
    assert report.not_checked == {"hardlinks", "inode_flags", "sparse", "special_files", "xattrs"} - set(seen)


def test_every_named_adapter_is_pinned_and_documents_its_options() -> None:
    assert set(PINNED) | set(PINNED_ELSEWHERE) == set(adapters.ADAPTERS)
    assert all((Path(__file__).parent / module).is_file() for module in PINNED_ELSEWHERE.values())
    for name in adapters.ADAPTERS:
        assert resolve_copier(name).label == name
        doc = adapters.adapter_module(name).__doc__ or ""
        assert "Every option, and why" in doc, name


def test_restic_json_reports_atime_set_to_mtime(tmpfs_strict: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _require_adapter("restic")
    code = main(["conformance", "--copier", "restic", "--corpus", "edge-times", "--base", str(tmpfs_strict), "--json"])
    doc = json.loads(capsys.readouterr().out)
    atime = next(item for item in doc["checks"] if item["check"] == "atime_ns")
    assert (code, atime["passed"], atime["diagnosis"]) == (1, False, "atime: set-to-mtime")


def _fake_tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(stat.S_IRWXU)


def test_a_missing_tool_exits_2_naming_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there, and no restic beside this Python
    assert main(["conformance", "--copier", "restic", "--corpus", "basic", "--base", str(tmp_path)]) == 2
    assert "apt-get install restic" in capsys.readouterr().err


def test_a_restore_that_fails_part_way_is_a_setup_error_with_its_stderr_not_a_row_of_passes(
        tmpfs_strict: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # init and backup "succeed"; restore creates the target, writes half a line and fails.
    _fake_tool(tmp_path, "restic", 'case "$1" in restore) mkdir -p "$4"; echo "restoring ..." >&2; '
                                   'echo "Fatal: unable to load snapshot: ciphertext verification failed" >&2; '
                                   'exit 1;; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ToolFailedError) as caught:
        conformance.check("restic", corpus="basic", base=tmpfs_strict)
    assert caught.value.returncode == 1
    assert "restic restore latest --target {dst}" in caught.value.command
    assert caught.value.stderr == "restoring ...\nFatal: unable to load snapshot: ciphertext verification failed\n"
    assert main(["conformance", "--copier", "restic", "--corpus", "basic", "--base", str(tmpfs_strict)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "ciphertext verification failed" in err and "restoring ..." in err


def test_an_adapter_logs_each_command_with_placeholders_instead_of_paths(tmp_path: Path) -> None:
    _require_adapter("tar-posix")
    src = tmp_path / "src"
    src.mkdir()
    log: list[str] = []
    adapters.runner("tar-posix", log)(str(src), str(tmp_path / "dst"))
    assert len(log) == 2 and all("{tmp}/a.tar" in line for line in log)
    assert "-C {src} ." in log[0] and "-C {dst}" in log[1]
    assert not any(str(tmp_path) in line for line in log)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]  # the scratch dir is gone


def test_bindfs_unmounts_after_a_failed_copy_and_reports_the_copy_not_the_unmount(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_adapter("bindfs")
    _fake_tool(tmp_path, "cp", 'echo "cp: cannot create regular file: Input/output error" >&2; exit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "src").mkdir()
    log: list[str] = []
    with pytest.raises(ToolFailedError, match="Input/output error") as caught:
        adapters.runner("bindfs", log)(str(tmp_path / "src"), str(tmp_path / "dst"))
    assert caught.value.command == "cp -a {src} {tmp}/mnt/tree"
    assert log[-1] == "fusermount3 -u {tmp}/mnt"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        assert str(tmp_path) not in mounts.read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp", "src"]  # scratch dir and mount point gone


@pytest.mark.parametrize("name", sorted(set(adapters.ADAPTERS) - {"zipfile", "tarfile", "mlflow"}))
def test_an_adapters_version_is_tool_missing_when_only_its_version_helper_is_on_path(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pax's version comes from dpkg-query, which a machine has without pax: that found tool must not make the
    # adapter look installed (its pinned-verdict test then failed instead of skipping on a fresh machine).
    for helper in ("dpkg-query", "sh", "cat"):
        if found := shutil.which(helper):
            (tmp_path / helper).symlink_to(found)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))  # nothing found beside this Python either
    with pytest.raises(ToolMissingError):
        adapters.version(name)

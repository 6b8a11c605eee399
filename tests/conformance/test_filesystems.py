"""Issue 50 item 5: conformance runs on the Linux filesystems people test on, xfs and btrfs included: an entry
the filesystem cannot hold is "not run" with the reason, and a refusal names the CLI's own option."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance import checks as conformance
from artifactkit.conformance.corpus import can_make_devices
from tests.support import faulty_copiers as faulty
from tests.support.capability import require_loop_devices, require_tool, skip_or_fail
from tests.support.mounts import Mounts


@pytest.fixture(scope="module")
def xfs(mounts: Mounts) -> Path:
    require_loop_devices()
    require_tool("mkfs.xfs", "xfsprogs")
    return mounts.xfs()


def test_a_device_number_xfs_cannot_hold_is_not_run_with_the_reason_and_the_rest_runs(xfs: Path) -> None:
    if not can_make_devices():
        skip_or_fail("needs CAP_MKNOD: without it no device node of special-files is built anywhere")
    report = conformance.check(faulty.exact, corpus=["special-files", "basic"], base=xfs)
    assert report.checked == ("special-files", "basic")
    row = report.result("special_files")
    assert row.passed is None and row.ran
    assert row.reason is not None and "dev/disk-local" in row.reason and "241,1048575" in row.reason
    assert "Invalid argument" in row.reason
    assert report.result("content").passed is True and report.result("mtime_ns").passed is True


def test_a_btrfs_refusal_names_the_clis_base_option(mounts: Mounts, capsys: pytest.CaptureFixture[str]) -> None:
    require_loop_devices()
    require_tool("mkfs.btrfs", "btrfs-progs")
    base = mounts.btrfs()
    assert main(["conformance", "--copier", "cp -a {src} {dst}", "--corpus", "basic", "--base", str(base)]) == 2
    err = capsys.readouterr().err
    assert "--base" in err and "--artifactkit-base" not in err

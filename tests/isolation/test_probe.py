"""The probe finds atime behaviour by experiment on real mounts, and leaves nothing behind."""

from __future__ import annotations

import argparse
import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from artifactkit._mounts import mount_info
from artifactkit.cli import probe as cli_probe
from artifactkit.isolation.probe import SCHEMA, probe_atime
from tests.support.mounts import Mounts

PROBE_KEYS = {"schema", "fs_type", "mount_options", "reads_move_historical_atime", "reads_move_future_atime",
              "atime_policy", "noatime_flag", "flag_inherited", "flag_effective", "granularity_ns",
              "pre_1970_ok", "post_2038_ok", "client_cache", "unverified", "time_range"}


def test_strictatime_tmpfs_moves_future_atimes_and_the_flag_works(tmpfs_strict: Path) -> None:
    probe = probe_atime(tmpfs_strict)
    assert (probe.fs_type, probe.atime_policy) == ("tmpfs", "strictatime")
    assert probe.reads_move_historical_atime and probe.reads_move_future_atime
    assert (probe.noatime_flag, probe.flag_inherited, probe.flag_effective) == ("supported", True, True)
    assert (probe.granularity_ns, probe.pre_1970_ok, probe.post_2038_ok) == (1, True, True)
    assert probe.to_json()["time_range"] == [-(2**63), 2**63 - 1]  # timespec64: every second the store holds
    assert probe.summary().endswith("time_range 64-bit seconds")


def test_relatime_moves_only_a_historical_atime(tmpfs_relatime: Path) -> None:
    probe = probe_atime(tmpfs_relatime)
    assert probe.reads_move_historical_atime and not probe.reads_move_future_atime
    assert probe.atime_policy == "relatime"
    assert "relatime" in probe.mount_options


def test_noatime_mount_moves_nothing_and_leaves_effectiveness_unknown(mounts: Mounts) -> None:
    probe = probe_atime(mounts.tmpfs("noatime"))
    assert probe.atime_policy == "noatime" and not probe.reads_move_atime
    # No positive control can be made where reads never move atime.
    assert (probe.noatime_flag, probe.flag_inherited, probe.flag_effective) == ("supported", True, None)


def test_ramfs_has_no_flag_and_both_flag_answers_are_null(mounts: Mounts) -> None:
    doc = probe_atime(mounts.ramfs()).to_json()
    assert (doc["fs_type"], doc["noatime_flag"]) == ("ramfs", "unsupported")
    assert doc["flag_inherited"] is None and doc["flag_effective"] is None
    assert doc["reads_move_historical_atime"] is True


def test_ext4_with_small_inodes_has_whole_seconds_and_ends_in_2038(ext4_whole_seconds: Path) -> None:
    probe = probe_atime(ext4_whole_seconds)
    assert probe.fs_type == "ext4"
    assert (probe.granularity_ns, probe.pre_1970_ok, probe.post_2038_ok) == (10**9, True, False)
    assert probe.to_json()["time_range"] == [-(2**31), 2**31 - 1]
    assert probe.summary().endswith("time_range 1901-12-13 .. 2038-01-19")  # as the docs' tables write it
    # Truncation by utime is not a read: the policy still comes out as the mount's relatime.
    assert probe.atime_policy == "relatime" and probe.flag_effective is True


def test_the_probe_removes_its_scratch_and_touches_nothing_else(tmpfs_relatime: Path) -> None:
    here = tmpfs_relatime / "probe-clean"
    here.mkdir()
    bystander = here / "bystander"
    bystander.write_bytes(b"keep")
    os.utime(bystander, ns=(1_000_000_000_123_456_789, 1_000_000_000_987_654_321))
    before = os.lstat(bystander)
    probe_atime(here)
    assert os.listdir(here) == ["bystander"]
    after = os.lstat(bystander)
    assert (after.st_atime_ns, after.st_mtime_ns, after.st_ctime_ns) == (
        before.st_atime_ns, before.st_mtime_ns, before.st_ctime_ns)


def test_probe_json_has_the_contract_keys_and_no_paths(tmpfs_strict: Path) -> None:
    doc = probe_atime(tmpfs_strict).to_json()
    assert set(doc) == PROBE_KEYS and doc["schema"] == SCHEMA
    assert str(tmpfs_strict) not in json.dumps(doc)
    assert isinstance(doc["mount_options"], list) and isinstance(doc["granularity_ns"], int)


def test_mount_info_takes_the_longest_point_unescapes_and_lets_stacked_mounts_win(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "2 1 0:5 / /data\\040dir rw,noatime - tmpfs tmpfs rw,size=1k\n"
        "3 1 0:6 / /data\\040dir rw,relatime - ramfs ramfs rw\n"
        "4 1 0:7 / /data rw - tmpfs tmpfs rw\n")
    real_data = os.path.realpath("/data dir")
    assert mount_info(real_data + "/x", str(table)).fs_type == "ramfs"
    assert mount_info("/data dir", str(table)).mount_point == "/data dir"
    assert mount_info("/datax", str(table)).fs_type == "ext4"


def test_cli_probe_prints_the_json_document(tmpfs_strict: Path) -> None:
    parser = _parser()
    args = parser.parse_args(["probe", str(tmpfs_strict), "--json"])
    out = io.StringIO()
    with redirect_stdout(out):
        assert args.func(args) == 0
    assert json.loads(out.getvalue())["atime_policy"] == "strictatime"


def test_cli_probe_prints_a_table_for_people(fast_tmp: Path) -> None:
    args = _parser().parse_args(["probe", str(fast_tmp)])
    out = io.StringIO()
    with redirect_stdout(out):
        assert args.func(args) == 0
    assert "granularity_ns" in out.getvalue() and " ns" in out.getvalue()


def test_cli_probe_exits_2_on_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["probe", str(tmp_path / "missing")])
    assert args.func(args) == 2
    assert "cannot probe" in capsys.readouterr().err


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cli_probe.register(parser.add_subparsers())
    return parser

"""The throw-away S3 server of the tests cleans up after itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def test_the_test_server_leaves_no_log_files_in_the_temp_dir(
        seaweedfs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.seaweedfs import running_seaweedfs

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # where weed's glog writes its files unless told otherwise
    with running_seaweedfs(str(tmp_path / "data")) as endpoint:
        assert endpoint.url.startswith("http://127.0.0.1:")
    assert sorted(os.listdir(temp)) == []
    assert (tmp_path / "data" / "weed.log").stat().st_size > 0  # its output went to its own log instead

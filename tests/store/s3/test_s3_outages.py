"""Outages of the endpoint (issue 53, item 3): the bucket client rides out 10 s of a server that does not answer
(SIGSTOP) or refuses connections (killed and started again on the same port and data); past its time budget
(``ARTIFACTKIT_S3_RETRY_S``) the operation fails with a named error, exit 2, and nothing visible; every
request sent again is counted in the ``--json`` result. One 10 s outage per test: they cost wall time, not CPU.
"""

from __future__ import annotations

import filecmp
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.store.s3 import download as s3_download
from artifactkit.store.s3 import transfer as s3_transfer
from tests.support.outages import OutageServer, outage_server  # noqa: F401 - a fixture

OUTAGE_S = 10.0


def _tree(root: Path, files: int = 40) -> Path:
    root.mkdir()
    for index in range(files):
        (root / f"f{index:03}").write_bytes(f"{index}:".encode() * 300)
    return root


def _same_tree(a: Path, b: Path) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and filecmp.cmpfiles(a, b, names, shallow=False)[1:] == ([], [])


def _outage_at_first(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, begin: Any) -> Any:
    """``module.name`` (a per-blob step) starts the outage when it is first called, then goes on into it; a
    function that puts the real step back (``undo`` would also take the server's environment)."""
    real, once = getattr(module, name), threading.Lock()

    def step(*args: Any) -> Any:
        if once.acquire(blocking=False):
            begin()
        return real(*args)
    monkeypatch.setattr(module, name, step)
    return lambda: monkeypatch.setattr(module, name, real)


def _run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], float]:
    capsys.readouterr()
    started = time.monotonic()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out), time.monotonic() - started


@pytest.mark.parametrize("outage", ["pause", "kill"])
def test_a_publish_rides_out_a_10_s_outage_of_the_endpoint_and_counts_its_retries(
        outage_server: OutageServer, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str], outage: str) -> None:
    src = _tree(fast_tmp / "src")
    url = outage_server.url("ride-publish")
    restore = _outage_at_first(monkeypatch, s3_transfer, "upload_blob",
                               lambda: getattr(outage_server, outage)(OUTAGE_S))
    code, doc, took = _run_json(["publish", str(src), "--name", "p", "--store", url], capsys)
    assert code == 0, doc
    assert outage_server.back.is_set() and took >= OUTAGE_S  # the outage was inside the operation
    assert doc["version"] == 1 and isinstance(doc["retries"], int)
    if outage == "kill":  # every request in flight was refused: each sent again, and counted
        assert doc["retries"] >= 1
    restore()
    store = Store(url)
    assert [ref.version for ref in store.list()] == [1] and store.verify().clean
    store.download("p@1", fast_tmp / "out")
    assert _same_tree(src, fast_tmp / "out")


@pytest.mark.parametrize("outage", ["pause", "kill"])
def test_a_download_rides_out_a_10_s_outage_of_the_endpoint_and_counts_its_retries(
        outage_server: OutageServer, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str], outage: str) -> None:
    src = _tree(fast_tmp / "src")
    url = outage_server.url("ride-download")
    Store(url).publish(src, "d")
    _outage_at_first(monkeypatch, s3_download, "fetch_whole", lambda: getattr(outage_server, outage)(OUTAGE_S))
    code, doc, took = _run_json(["download", "d", str(fast_tmp / "out"), "--store", url], capsys)
    assert code == 0, doc
    assert outage_server.back.is_set() and took >= OUTAGE_S
    assert doc["dest_verified"] and isinstance(doc["retries"], int)
    if outage == "kill":
        assert doc["retries"] >= 1
    assert _same_tree(src, fast_tmp / "out")


@pytest.mark.parametrize("operation", ["publish", "download"])
def test_an_outage_past_the_retry_budget_is_a_named_error_exit_2_and_leaves_nothing_visible(
        outage_server: OutageServer, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str], operation: str) -> None:
    src = _tree(fast_tmp / "src")
    url = outage_server.url(f"budget-{operation}")
    if operation == "download":
        Store(url).publish(src, "b")
    monkeypatch.setenv("ARTIFACTKIT_S3_RETRY_S", "2")
    module, step = (s3_transfer, "upload_blob") if operation == "publish" else (s3_download, "fetch_whole")
    restore = _outage_at_first(monkeypatch, module, step, lambda: outage_server.kill(None))
    argv = ["publish", str(src), "--name", "b"] if operation == "publish" else ["download", "b", str(fast_tmp / "out")]
    capsys.readouterr()
    started = time.monotonic()
    assert main([*argv, "--store", url]) == 2
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unreachable" in err and "ARTIFACTKIT_S3_RETRY_S=2" in err, err
    assert 2.0 <= took < 30.0  # the budget was spent waiting, and it bounded the wait
    restore()
    monkeypatch.delenv("ARTIFACTKIT_S3_RETRY_S")
    outage_server.start()
    assert sorted(os.listdir(fast_tmp)) == ["src"]  # no download, no blob dir, no staging
    assert [ref.version for ref in Store(url).list()] == ([1] if operation == "download" else [])


def test_the_retry_budget_setting_is_refused_by_name_unless_a_whole_number_of_seconds(
        outage_server: OutageServer, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ARTIFACTKIT_S3_RETRY_S", "10s")
    assert main(["ls", "--store", outage_server.url("setting")]) == 2
    assert "ARTIFACTKIT_S3_RETRY_S='10s'" in capsys.readouterr().err

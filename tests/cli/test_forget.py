"""``artifactkit forget`` and ``gc --grace``: versions let go of on the command line, exit codes, ``--json``, and
one answer from ``gc`` and ``verify`` about what the grace keeps."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from artifactkit.cli.main import main
from artifactkit.store.store import Store
from tests.support.stores import store_snapshot


def _published(fast_tmp: Path, store: str, count: int) -> None:
    for i in range(1, count + 1):
        src = fast_tmp / f"v{i}"
        src.mkdir()
        (src / "f").write_bytes(f"version {i}\n".encode() * 1000)
        Store(store).publish(src, "demo")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_forget_by_version_and_keep_last_then_gc_frees_their_bytes(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(fast_tmp / "store")
    _published(fast_tmp, store, 4)
    code, doc = _run(capsys, "forget", "--store", store, "demo@1")
    assert code == 0 and doc["schema"] == "artifactkit.forget/1" and doc["dry_run"] is False
    assert [(v["name"], v["version"]) for v in doc["forgotten"]] == [("demo", 1)]
    code, doc = _run(capsys, "forget", "--store", store, "demo", "--keep-last", "1")
    assert code == 0 and [v["version"] for v in doc["forgotten"]] == [2, 3]
    assert [r.version for r in Store(store).list()] == [4]
    assert main(["gc", "--store", store]) == 0
    # Each forgotten version's own content and its tree's one object (its root directory's).
    assert "removed 6 blob(s)" in capsys.readouterr().out
    assert main(["download", "demo", str(fast_tmp / "out"), "--store", store]) == 0
    assert (fast_tmp / "out" / "f").read_bytes() == (fast_tmp / "v4" / "f").read_bytes()


def test_forget_text_says_what_went_and_that_gc_frees_it(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(fast_tmp / "store")
    _published(fast_tmp, store, 2)
    assert main(["forget", "--store", store, "demo@1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would forget 1 version(s): demo@1" in out and "nothing removed" in out
    assert main(["forget", "--store", store, "demo@1"]) == 0
    out = capsys.readouterr().out
    assert "forgot 1 version(s): demo@1" in out and f"artifactkit gc --store {store}" in out


@pytest.mark.parametrize("argv", [
    ["demo", "--keep-last", "0"],  # never every version by a typo (restic refuses it too)
    ["demo", "--keep-last", "-2"],
    ["demo"],                      # a bare name without --keep-last: which versions?
    ["demo@1", "--keep-last", "1"],
    [],
])
def test_forget_usage_errors_are_exit_2_and_remove_nothing(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    store = str(fast_tmp / "store")
    _published(fast_tmp, store, 2)
    before = store_snapshot(Store(store))
    code, doc = _run(capsys, "forget", "--store", store, *argv)
    assert code == 2 and doc["schema"] == "artifactkit.error/1"
    assert store_snapshot(Store(store)) == before


def test_forget_of_a_missing_version_is_exit_2_and_removes_none_of_the_others(
        fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(fast_tmp / "store")
    _published(fast_tmp, store, 2)
    before = store_snapshot(Store(store))
    code, doc = _run(capsys, "forget", "--store", store, "demo@1", "demo@7")
    assert code == 2 and doc["type"] == "LookupError" and "no version 7" in doc["message"]
    code, doc = _run(capsys, "forget", "--store", store, "demo", "nope", "--keep-last", "1")
    assert code == 2 and doc["type"] == "LookupError"
    assert store_snapshot(Store(store)) == before


def test_gc_grace_option_keeps_young_leftovers_and_says_so(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = fast_tmp / "store"
    _published(fast_tmp, str(store), 1)
    data = os.urandom(8192)
    (store / "blobs" / hashlib.sha256(data).hexdigest()).write_bytes(data)
    code, doc = _run(capsys, "gc", "--store", str(store), "--grace", "10m")
    assert code == 0 and doc["grace_s"] == 600 and doc["kept_blobs"] == [hashlib.sha256(data).hexdigest()]
    assert doc["removed_blobs"] == [] and doc["kept_bytes"] >= 8192 and 0 < doc["kept_wait_s"] <= 600
    assert main(["gc", "--store", str(store), "--grace", "1h"]) == 0
    out = capsys.readouterr().out
    assert "kept 1 blob(s)" in out and "younger than the grace of 1h" in out and "no leftovers" not in out
    code, doc = _run(capsys, "gc", "--store", str(store), "--grace", "0")
    assert code == 0 and len(doc["removed_blobs"]) == 1 and doc["kept_blobs"] == []


@pytest.mark.parametrize("grace", ["soon", "-1", "10x", "1.5h", ""])
def test_gc_refuses_a_grace_it_cannot_read_exit_2(fast_tmp: Path, capsys: pytest.CaptureFixture[str],
                                                  grace: str) -> None:
    store = str(fast_tmp / "store")
    _published(fast_tmp, store, 1)
    assert main(["gc", "--store", store, "--grace", grace]) == 2
    assert "grace" in capsys.readouterr().err

"""``artifactkit gc`` and ``verify`` on a bucket: one answer about what the grace keeps (the CLI's side of
``tests/store/test_gc_grace.py``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.store.store import Store


def _published(src: Path, store: str) -> None:
    src.mkdir()
    (src / "f").write_bytes(b"version 1\n")
    Store(store).publish(src, "demo")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_on_a_bucket_gc_and_verify_say_the_same_of_a_young_leftover(
        s3_url: str, fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _published(fast_tmp / "src", s3_url)
    data = os.urandom(4096)
    sha = hashlib.sha256(data).hexdigest()
    Store(s3_url).bucket.put(f"blobs/{sha}", data, sha256=sha)  # type: ignore[attr-defined]
    assert main(["gc", "--store", s3_url]) == 0
    out = capsys.readouterr().out
    assert "no leftovers" not in out and "kept 1 blob(s)" in out and "younger than the grace of 1h" in out
    assert main(["verify", "--store", s3_url]) == 0  # was exit 1, "orphaned", telling the user to run gc
    out = capsys.readouterr().out
    assert "kept" in out and "orphaned" not in out.split("\n\n")[-1]
    code, doc = _json(capsys, "verify", "--store", s3_url)
    assert code == 0 and doc["kept"] == [f"blobs/{sha}"] and doc["orphaned"] == [] and doc["grace_s"] == 3600
    assert main(["gc", "--store", s3_url, "--grace", "0"]) == 0
    assert "removed 1 blob(s)" in capsys.readouterr().out
    code, doc = _json(capsys, "verify", "--store", s3_url)
    assert code == 0 and doc["kept"] == [] and doc["clean"] is True

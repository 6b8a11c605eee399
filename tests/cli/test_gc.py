"""``artifactkit gc``: what an interrupted publish left behind is removed, and the bytes it freed are counted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.store.store import Store


def _allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


@pytest.fixture
def leftovers(fast_tmp: Path) -> tuple[Path, list[Path]]:
    """A store with ``demo@1``, a killed publish's staging (1 MiB staged) and an unreferenced 64 KiB blob."""
    materialize("basic", fast_tmp / "src")
    store = fast_tmp / "store"
    Store(store).publish(fast_tmp / "src", "demo")
    txn = store / "staging" / "publish-1-dead"
    txn.mkdir()
    (txn / "blob-0").write_bytes(os.urandom(1 << 20))
    orphan = store / "blobs" / ("f" * 64)
    orphan.write_bytes(os.urandom(64 << 10))
    return store, [txn / "blob-0", orphan]


def test_gc_removes_an_interrupted_publishs_leftovers_and_counts_the_bytes_it_freed(
        leftovers: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]) -> None:
    store, files = leftovers
    expected = sum(_allocated(path) for path in files)
    assert main(["gc", "--store", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "artifactkit.gc/1" and doc["dry_run"] is False
    assert doc["removed_blobs"] == ["f" * 64] and doc["removed_staging"] == ["publish-1-dead"]
    assert doc["freed_bytes"] == expected >= (1 << 20) + (64 << 10), "staging counts: it was 0 for a killed publish"
    assert not any(path.exists() for path in files)
    assert main(["verify", "--store", str(store)]) == 0
    assert main(["download", "demo", str(store.parent / "out"), "--store", str(store)]) == 0


def test_gc_dry_run_reports_the_same_and_removes_nothing(leftovers: tuple[Path, list[Path]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store, files = leftovers
    expected = sum(_allocated(path) for path in files)
    assert main(["gc", "--store", str(store), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove 1 blob(s) and 1 staging leftover(s)" in out and "MiB" in out
    assert all(path.exists() for path in files)
    assert main(["gc", "--store", str(store), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and doc["freed_bytes"] == expected


def test_gc_of_a_clean_store_removes_nothing_and_says_so(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    materialize("basic", fast_tmp / "src")
    Store(fast_tmp / "store").publish(fast_tmp / "src", "demo")
    assert main(["gc", "--store", str(fast_tmp / "store")]) == 0
    assert "removed nothing" in capsys.readouterr().out


def test_gc_of_a_path_that_is_no_store_is_exit_2_and_creates_nothing(fast_tmp: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gc", "--store", str(fast_tmp / "typo")]) == 2
    assert "no artifactkit store" in capsys.readouterr().err
    assert not (fast_tmp / "typo").exists()


def test_gc_refuses_to_sweep_while_a_manifest_is_unreadable_exit_1(leftovers: tuple[Path, list[Path]],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store, files = leftovers
    manifest = next((store / "manifests" / "demo").iterdir())
    manifest.unlink()  # manifests are read-only: a writer of the store replaces one
    manifest.write_bytes(b"{")
    assert main(["gc", "--store", str(store)]) == 1
    assert "unreadable" in capsys.readouterr().err
    assert files[1].exists(), "no blob removed while nobody can say which blobs that manifest needs"


def test_verify_names_the_gc_command_for_leftovers(leftovers: tuple[Path, list[Path]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store, _ = leftovers
    assert main(["verify", "--store", str(store)]) == 1
    assert f"artifactkit gc --store {store}" in capsys.readouterr().out

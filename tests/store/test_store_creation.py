"""A store is created only where there was nothing: a typo'd ``--store`` or a folder of the user's own files
is refused (``NotAStoreError``, CLI exit 2) and left exactly as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import NotAStoreError
from tests.support.crash import snapshot


@pytest.fixture
def src(fast_tmp: Path) -> Path:
    materialize("basic", fast_tmp / "src")
    return fast_tmp / "src"


def test_publish_into_a_missing_path_creates_the_store_and_its_parents(src: Path) -> None:
    store = src.parent / "a" / "b" / "store"
    assert Store(store).publish(src, "demo").version == 1
    assert sorted(os.listdir(store)) == ["blobs", "locks", "manifests", "staging"]


def test_publish_into_an_empty_directory_makes_it_the_store(src: Path) -> None:
    (src.parent / "store").mkdir()
    assert Store(src.parent / "store").publish(src, "demo").version == 1


def test_publish_into_a_store_adds_a_version(src: Path) -> None:
    Store(src.parent / "store").publish(src, "demo")
    assert Store(src.parent / "store").publish(src, "demo").version == 2


def test_publish_into_a_folder_of_other_files_is_refused_and_touches_nothing(src: Path) -> None:
    folder = src.parent / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own files")
    (folder / "blobs").mkdir()  # even with one name a store would have
    before = snapshot(folder)
    with pytest.raises(NotAStoreError, match="not an artifactkit store") as caught:
        Store(folder).publish(src, "demo")
    assert caught.value.path == str(folder)
    assert snapshot(folder) == before
    assert sorted(os.listdir(folder)) == ["blobs", "notes.txt"]


def test_publish_into_a_file_is_refused_and_touches_nothing(src: Path) -> None:
    file = src.parent / "file"
    file.write_text("data")
    with pytest.raises(NotAStoreError):
        Store(file).publish(src, "demo")
    assert file.read_text() == "data"
    with pytest.raises(NotAStoreError):
        Store(file / "store").publish(src, "demo")
    assert file.read_text() == "data"


def test_a_store_half_created_by_a_killed_publisher_is_still_a_store(src: Path) -> None:
    store = src.parent / "store"
    store.mkdir()
    (store / "manifests").mkdir()  # created first, so a concurrent publisher sees a store
    assert Store(store).publish(src, "demo").version == 1


def test_cli_publish_into_a_non_store_folder_is_exit_2_with_one_line(src: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = src.parent / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own files")
    assert main(["publish", str(src), "--store", str(folder), "--name", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an artifactkit store" in err
    assert os.listdir(folder) == ["notes.txt"]


@pytest.mark.parametrize("command", ["publish", "download", "verify", "gc", "ls"])
def test_every_store_option_says_it_takes_a_path_or_an_s3_url(command: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert "s3://bucket/prefix" in " ".join(capsys.readouterr().out.split())

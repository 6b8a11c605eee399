"""A download onto a filesystem whose client may cache attributes reads its times back again once that cache has
expired (issue 49: ``weed mount`` said "verified exact" from the kernel's copy, and a second later atime read back
as mtime). The real ``weed mount`` is in ``tests/test_fs_matrix_fuse.py``; here the cache's expiry is played by the
wait itself, on a local filesystem."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import MetadataMismatchError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.store import download, fresh_looks
from artifactkit.store.downloaded import Downloaded
from artifactkit.store.store import Store


@pytest.fixture
def store(fast_tmp: Path) -> Store:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    store.publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    return store


def test_a_time_that_changes_once_the_cache_expires_is_refused_and_nothing_is_made_visible(
        store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    def cache_expires(seconds: float) -> None:
        # What weed mount's filer holds: no atime, so once the cache is gone atime reads back as mtime.
        waits.append(seconds)
        for path in (fast_tmp / "work").rglob("*"):
            if path.is_file() and not path.is_symlink():
                os.utime(path, ns=(os.lstat(path).st_mtime_ns, os.lstat(path).st_mtime_ns))

    monkeypatch.setattr(download, "may_cache", lambda parent: True)
    monkeypatch.setattr(download.time, "sleep", cache_expires)
    with pytest.raises(MetadataMismatchError, match="set-to-mtime"):
        store.download("demo", fast_tmp / "work" / "dest")
    assert waits == [download.PAST_ATTRIBUTE_CACHE_S]
    assert os.listdir(fast_tmp / "work") == []


def test_a_local_filesystem_is_read_back_once_and_never_waited_on(
        store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(download.time, "sleep", waits.append)
    store.download("demo", fast_tmp / "work" / "dest")
    assert waits == []


def test_a_calibration_that_shows_the_rename_fresh_leaves_the_download_verified_and_nothing_behind(
        store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "may_cache", lambda parent: True)
    monkeypatch.setattr(download.time, "sleep", lambda seconds: None)
    done = store.download("demo", fast_tmp / "work" / "dest")
    assert done.unverified == ()
    assert os.listdir(fast_tmp / "work") == ["dest"]


@pytest.mark.parametrize("broken", ["no link", "the cache moves with the rename"])
def test_where_no_look_can_be_shown_fresh_the_times_are_named_unverified(
        store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    monkeypatch.setattr(download, "may_cache", lambda parent: True)
    monkeypatch.setattr(download.time, "sleep", lambda seconds: None)
    if broken == "no link":
        def no_link(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EPERM, "link")  # what s3fs (ENOTSUP) and rclone mount (EIO) answer alike
        monkeypatch.setattr(fresh_looks.os, "link", no_link)
    else:
        monkeypatch.setattr(fresh_looks, "passes", lambda private_fd: False)
    done = store.download("demo", fast_tmp / "work" / "dest")
    assert done.unverified == ("mtime_ns", "atime_ns")
    assert os.listdir(fast_tmp / "work") == ["dest"]


def test_a_downloaded_ref_compares_sorts_and_hashes_as_the_ref_it_is(store: Store, fast_tmp: Path) -> None:
    (ref,) = store.list()
    done = store.download("demo", fast_tmp / "work" / "dest")
    unverified = Downloaded(ref.name, ref.version, ref.digest, unverified=("mtime_ns", "atime_ns"))
    assert done == ref == unverified and ref == done and (ref != done) is False and (done != ref) is False
    assert {ref, done, unverified} == {ref} and hash(done) == hash(ref)
    later = ArtifactRef(ref.name, ref.version + 1, ref.digest)
    assert sorted([later, done]) == [ref, later] and done < later and later > done and done <= ref <= unverified


def test_the_cli_names_unverified_times_in_its_line_and_json_and_never_says_they_are_exact(
        store: Store, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(download, "may_cache", lambda parent: True)
    monkeypatch.setattr(download.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(fresh_looks, "passes", lambda private_fd: False)
    where = ["--store", str(fast_tmp / "store")]
    assert main(["download", "demo", str(fast_tmp / "work" / "json"), *where, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["dest_verified"], doc["unverified"]) == (False, ["mtime_ns", "atime_ns"])
    assert main(["download", "demo", str(fast_tmp / "work" / "text"), *where]) == 0
    line = capsys.readouterr().out
    assert "verified exact (mode, owner, xattrs, links, holes, flags) but mtime_ns, atime_ns: unverified" in line
    assert "flags, mtime_ns, atime_ns)" not in line
    monkeypatch.undo()
    assert main(["download", "demo", str(fast_tmp / "work" / "local"), *where, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unverified"] == []

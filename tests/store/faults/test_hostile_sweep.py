"""Whoever can rename entries in a download's parent cannot make the download delete anything.

A download removes the private directories killed downloads left beside their destination. It used to pick
them by *name* (the pattern, our uid, a free flock): anyone who can rename entries in that parent (a team
directory, a shared results dir) renamed a victim's directory to the pattern, and the victim's next download
emptied it, for a bucket store even when the download itself was then refused. Now a directory is removed only
if it carries the marker its maker wrote (an HMAC, under the user's own key, of the directory's device, inode
and name): a victim's directory never has one, and a marker copied or moved into one names another inode.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store
from artifactkit.conformance.corpus import materialize
from artifactkit.store import user_cache
from tests.support.crash import snapshot
from tests.support.hostile_store import blob_bytes, put_blob
from tests.support.leftovers import killed_download, killed_private_dir
from tests.support.stores import is_bucket

#: A local download's private directory is ``.DEST.artifactkit-`` and 12 hex digits; a bucket download's
#: fetched blobs also go into ``.artifactkit-s3-blobs-`` and 16.
LOCAL, BUCKET = ".artifactkit-", ".artifactkit-s3-blobs-"


def _victim_dir(path: Path, mode: int) -> dict[str, tuple[object, ...]]:
    """A directory of the victim's (same uid as the downloader) with files and a subdirectory; its snapshot."""
    (path / "results").mkdir(parents=True)
    (path / "notes.txt").write_bytes(b"three weeks of measurements\n")
    (path / "results" / "run-1.csv").write_bytes(b"t,value\n0,1\n" * 100)
    os.chmod(path, mode)
    return snapshot(path)


def _victims(work: Path, dests: list[str], mode: int) -> dict[Path, dict[str, tuple[object, ...]]]:
    """Victim directories renamed to every pattern a download to one of ``dests`` in ``work`` sweeps."""
    names = [f".{dest}{LOCAL}{'0123456789ab'}" for dest in dests] + [f"{BUCKET}{'0123456789abcdef'}"]
    return {work / name: _victim_dir(work / name, mode) for name in names}


@pytest.fixture
def published(fast_tmp: Path, any_store: Store) -> tuple[Store, Path]:
    """``demo@1`` of the ``basic`` tree in a local store and in a bucket; ``work/`` for destinations."""
    materialize("basic", fast_tmp / "src")
    any_store.publish(fast_tmp / "src", "demo")
    (fast_tmp / "work").mkdir()
    return any_store, fast_tmp


@pytest.mark.parametrize("mode", [0o700, 0o755], ids=["private", "readable"])
def test_a_victims_directory_renamed_to_the_private_dir_pattern_survives_every_download(
        published: tuple[Store, Path], mode: int) -> None:
    store, tmp = published
    work = tmp / "work"
    victims = _victims(work, ["dest", "refused"], mode)
    store.download("demo", work / "dest")
    # A refused download sweeps first too: the bucket's fetch makes its private directory before any blob is
    # checked, and a local download its own before the first blob is read.
    entry = next(e for e in store.manifest("demo").entries if e.kind == "file" and e.size)
    assert entry.sha256 is not None
    put_blob(store, entry.sha256, bytes(len(blob_bytes(store, entry.sha256))))  # same size, other bytes
    with pytest.raises(IntegrityError):
        store.download("demo", work / "refused")
    for path, before in victims.items():
        assert snapshot(path) == before, f"{path.name} was changed by a download"
        assert os.stat(path).st_mode & 0o7777 == mode
    assert sorted(os.listdir(work)) == sorted(["dest", *(path.name for path in victims)])


def test_a_killed_downloads_own_leftovers_are_swept_by_the_next_download_and_a_live_ones_are_not(
        published: tuple[Store, Path]) -> None:
    store, tmp = published
    work = tmp / "work"
    live = killed_download(store, "demo", work / "dest")
    holders = [os.open(work / name, os.O_RDONLY | os.O_DIRECTORY) for name in live]
    try:
        for fd in holders:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as a download still in flight holds its own
        left = killed_download(store, "demo", work / "dest")  # its own sweep leaves the live ones alone
        # Its tree (and, from a bucket, the fetched blobs): everything was restored, nothing renamed into place.
        assert len(left) == len(live) == (2 if is_bucket(store) else 1) and not (work / "dest").exists()
        assert all(os.listdir(work / name) for name in left)
        store.download("demo", work / "dest")
        assert sorted(os.listdir(work)) == sorted(["dest", *live])
    finally:
        for fd in holders:
            os.close(fd)
    shutil.rmtree(work / "dest")
    store.download("demo", work / "dest")  # their flocks are free now: their makers were killed too
    assert os.listdir(work) == ["dest"]


@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_marker_taken_from_a_real_leftover_does_not_make_another_directory_removable(
        published: tuple[Store, Path], how: str) -> None:
    from artifactkit.store.private_dir import MARKER

    store, tmp = published
    work = tmp / "work"
    prefix = f".dest{LOCAL}"
    real = killed_private_dir(work, prefix, 12)
    victim = work / f"{prefix}{'fedcba987654'}"
    before = _victim_dir(victim, 0o700)
    if how == "copied":
        shutil.copy2(real / MARKER, victim / MARKER)
    else:
        # The marker moved into the victim, which then takes the leftover's very name: only the inode differs.
        os.rename(real / MARKER, victim / MARKER)
        os.rename(real, work / "moved-away")
        os.rename(victim, real)
        victim = real
    before = {**before, MARKER: snapshot(victim)[MARKER]}
    store.download("demo", work / "dest")
    assert snapshot(victim) == before
    if how == "copied":
        assert not real.exists(), "the real leftover, with its own marker, was not swept"


def test_a_download_without_a_usable_user_cache_dir_works_and_removes_nothing(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, tmp = published
    work = tmp / "work"
    (tmp / "file").write_bytes(b"")
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(tmp / "file" / "cache"))  # can never be made: no key
    left = killed_download(store, "demo", work / "dest")
    store.download("demo", work / "dest")
    assert sorted(os.listdir(work)) == sorted(["dest", *left])  # unproven: left for the user, never guessed at


def test_a_user_cache_dir_others_can_write_proves_nothing_and_a_download_still_works(
        published: tuple[Store, Path], user_cache_dir: Path) -> None:
    store, tmp = published
    work = tmp / "work"
    left = killed_download(store, "demo", work / "dest")
    # Whoever can write the cache dir could put a key of theirs there and forge markers: it is not used.
    os.chmod(user_cache_dir, 0o777)  # noqa: S103 - the unsafe mode under test
    # A key once read stays good for its process (user_cache), and a bucket publish reads it for its local staging:
    # the download is that of a process that starts with the directory unsafe.
    user_cache._KEYS.clear()
    store.download("demo", work / "dest")
    assert sorted(os.listdir(work)) == sorted(["dest", *left])
    os.chmod(user_cache_dir, 0o700)
    shutil.rmtree(work / "dest")
    store.download("demo", work / "dest")
    assert os.listdir(work) == ["dest"]


def test_a_leftover_the_sweep_cannot_empty_keeps_its_marker_and_is_swept_once_it_can_be(
        published: tuple[Store, Path]) -> None:
    from artifactkit.store.private_dir import MARKER
    from tests.support.capability import skip_or_fail

    store, tmp = published
    work = tmp / "work"
    left = killed_private_dir(work, f".dest{LOCAL}", 12)
    # A file the emptying cannot remove, in a directory (whose removal goes on past what it cannot remove): the
    # rmdir then fails, and the marker is put back.
    (left / "sub").mkdir()
    stuck = left / "sub" / "stuck"
    stuck.write_bytes(b"")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True, check=False).returncode:
        skip_or_fail("needs chattr +i (CAP_LINUX_IMMUTABLE in the initial namespace, real root)")
    try:
        store.download("demo", work / "dest")
        assert sorted(os.listdir(left)) == sorted([MARKER, "sub"]) and os.listdir(left / "sub") == ["stuck"]
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    shutil.rmtree(work / "dest")
    store.download("demo", work / "dest")
    assert os.listdir(work) == ["dest"]

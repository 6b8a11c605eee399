"""An S3 download next to a directory someone else can write: its private blob dir cannot be turned.

Whoever can write DEST's parent can rename the download's private blob directory away and put a
symlink to any directory in its place. The canary directory here stands for ``/etc/cron.d``: it must
never gain an entry, and every download either succeeds (verified exact) or raises a named error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from artifactkit import ArtifactkitError, Store, UnsafePathError
from artifactkit.store.s3 import objects

PREFIX = ".artifactkit-s3-blobs-"


def _tree(root: Path, files: int, size: int = 1000) -> Path:
    root.mkdir()
    for index in range(files):
        (root / f"f{index:03}").write_bytes(f"{index}:".encode() * (size // 4))
    return root


def _same_files(a: Path, b: Path) -> bool:
    return sorted(os.listdir(a)) == sorted(os.listdir(b)) and all(
        (a / name).read_bytes() == (b / name).read_bytes() for name in os.listdir(a))


def _swap(parent: Path, canary: Path, name: str) -> None:
    """What the attacker does: the private dir renamed away, a symlink to the canary under its name."""
    os.rename(parent / name, parent / f"stolen-{name[len(PREFIX):]}")
    os.symlink(canary, parent / name)


def test_a_blob_dir_swapped_for_a_symlink_before_the_first_blob_writes_nothing_through_it(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(fast_tmp / "src", 3)
    ref = Store(s3_url).publish(src, "d")
    (fast_tmp / "work").mkdir()
    (fast_tmp / "canary").mkdir()
    real_stream, swapped, once = objects.Bucket.stream, [], threading.Lock()

    def swap_then_stream(self: Any, key: str, **kw: Any) -> Any:
        with once:  # blobs are fetched on several threads: the first GET swaps, before any blob is written
            if not swapped:
                name = next(n for n in os.listdir(fast_tmp / "work") if n.startswith(PREFIX))
                _swap(fast_tmp / "work", fast_tmp / "canary", name)
                swapped.append(name)
        return real_stream(self, key, **kw)

    monkeypatch.setattr(objects.Bucket, "stream", swap_then_stream)
    refused: ArtifactkitError | None = None
    try:
        Store(s3_url).download(ref, fast_tmp / "work" / "out")
    except ArtifactkitError as err:
        refused = err
    assert swapped and os.listdir(fast_tmp / "canary") == []
    if refused is None:
        assert _same_files(src, fast_tmp / "work" / "out")
    else:
        assert isinstance(refused, UnsafePathError), refused
        assert swapped[0] in str(refused)  # the refusal names the directory that was swapped
        assert not (fast_tmp / "work" / "out").exists()
    # The symlink the attacker planted is theirs: neither followed nor removed.
    assert os.readlink(fast_tmp / "work" / swapped[0]) == str(fast_tmp / "canary")
    # What the download made, it removed through its fd even after the rename: the stolen dir is empty.
    assert os.listdir(fast_tmp / "work" / f"stolen-{swapped[0][len(PREFIX):]}") == []


def test_a_blob_dir_swapped_after_the_restore_is_reported_with_dest_complete_and_nothing_followed(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from artifactkit.store import store as store_module

    src = _tree(fast_tmp / "src", 3)
    ref = Store(s3_url).publish(src, "d")
    work, canary = fast_tmp / "work", fast_tmp / "canary"
    work.mkdir()
    canary.mkdir()
    real_restore = store_module.restore_tree

    def restore_then_swap(*args: Any, **kwargs: Any) -> tuple[str, ...]:
        unverified = real_restore(*args, **kwargs)
        _swap(work, canary, next(n for n in os.listdir(work) if n.startswith(PREFIX)))
        return unverified

    monkeypatch.setattr(store_module, "restore_tree", restore_then_swap)
    with pytest.raises(UnsafePathError, match="completed and verified exact") as caught:
        Store(s3_url).download(ref, work / "out")
    assert caught.value.dest == str(work / "out") and _same_files(src, work / "out")  # type: ignore[attr-defined]
    (link,) = (n for n in os.listdir(work) if n.startswith(PREFIX))
    assert os.readlink(work / link) == str(canary) and os.listdir(canary) == []
    assert os.listdir(work / f"stolen-{link[len(PREFIX):]}") == []  # emptied through its fd, wherever it went


_ATTACKER = textwrap.dedent("""
    import os, sys
    parent, canary, prefix = sys.argv[1:4]
    swaps = 0
    try:
        while True:
            for name in os.listdir(parent):
                if name.startswith(prefix) and not os.path.islink(os.path.join(parent, name)):
                    try:
                        os.rename(os.path.join(parent, name), os.path.join(parent, "stolen-" + name))
                        os.symlink(canary, os.path.join(parent, name))
                        swaps += 1
                    except OSError:
                        pass
    except KeyboardInterrupt:
        print(swaps, flush=True)
""")


@contextmanager
def _attacker(parent: Path, canary: Path) -> Iterator[list[int]]:
    """A process swapping every private blob dir it sees, in a loop; yields [swaps] once stopped."""
    proc = subprocess.Popen([sys.executable, "-c", _ATTACKER, str(parent), str(canary), PREFIX],
                            stdout=subprocess.PIPE, text=True)
    result: list[int] = []
    try:
        yield result
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        result.append(int(out.strip() or "0"))


RACE_RUNS = int(os.environ.get("ARTIFACTKIT_S3_RACE_RUNS", "200"))


def test_a_loop_swapping_the_blob_dir_for_a_symlink_never_gets_a_byte_written_outside(
        s3_url: str, fast_tmp: Path) -> None:
    src = _tree(fast_tmp / "src", 3)
    store = Store(s3_url)
    ref = store.publish(src, "d")
    from artifactkit.engine.select import engine_for
    from artifactkit.store.versions import read_entries

    with store.backend.open() as opened:  # fetched once: the race is in the blob dir, not in the lookups
        entries = read_entries(opened, ref, engine_for(None, "parse"))
    work, canary = fast_tmp / "work", fast_tmp / "canary"
    work.mkdir()
    canary.mkdir()
    outcomes: dict[str, int] = {}
    from artifactkit.store.download import restore_tree
    from artifactkit.store.progress import Reporter

    needed = entries.blobs()
    started = time.monotonic()
    with _attacker(work, canary) as swaps, store.backend.open() as opened:
        for run in range(RACE_RUNS):
            dest = work / f"out{run}"
            try:  # what Store.download does once it has the manifest: fetch the blobs, restore from them
                with opened.blob_source(needed, str(dest), Reporter(None)) as blobs:
                    restore_tree(entries, str(dest), blob_path=blobs)
            except ArtifactkitError as err:  # a named refusal, never a generic crash
                outcomes[type(err).__name__] = outcomes.get(type(err).__name__, 0) + 1
                if getattr(err, "dest", None):  # swapped after the restore: it says dest is complete
                    assert isinstance(err, UnsafePathError) and _same_files(src, dest)
                else:
                    assert not dest.exists()
            else:
                outcomes["ok"] = outcomes.get("ok", 0) + 1
                assert _same_files(src, dest)
            assert os.listdir(canary) == [], f"run {run}: a blob was written through the planted symlink"
    elapsed = time.monotonic() - started
    print(f"{RACE_RUNS} downloads in {elapsed:.1f} s against {swaps[0]} swaps: {outcomes}")
    assert swaps[0] > 0, "the attacker never swapped a private dir: the race was not exercised"
    assert sum(outcomes.values()) == RACE_RUNS


_KILLED_AFTER_ONE_BLOB = textwrap.dedent("""
    import os, signal, sys
    from artifactkit import Store
    from artifactkit.store.s3 import download

    real = download.fetch_whole

    def fetch_then_die(*args):
        real(*args)
        os.kill(os.getpid(), signal.SIGKILL)  # a kill point in the child only: the code under test ships as is

    download.fetch_whole = fetch_then_die
    Store(sys.argv[1]).download("d@1", sys.argv[2])
""")


def test_a_sigkilled_download_leaves_its_blob_dir_and_the_next_download_there_sweeps_it(
        s3_url: str, fast_tmp: Path) -> None:
    import fcntl

    src = _tree(fast_tmp / "src", 3)
    Store(s3_url).publish(src, "d")
    work = fast_tmp / "work"
    work.mkdir()
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_ONE_BLOB, s3_url, str(work / "out1")], check=False)
    assert killed.returncode == -signal.SIGKILL
    (left,) = os.listdir(work)
    # Killed mid-download (threads fetch in parallel: one to three blobs had landed), DEST never made.
    assert left.startswith(PREFIX) and os.listdir(work / left)
    # What the sweep must leave alone: a live download's dir (its flock held), a symlink and a plain
    # file under the exact pattern, and a directory whose suffix is not 16 hex digits.
    (work / "canary").mkdir()
    live = work / f"{PREFIX}{'a' * 16}"
    live.mkdir(0o700)
    os.symlink(work / "canary", work / f"{PREFIX}{'b' * 16}")
    (work / f"{PREFIX}{'c' * 16}").write_bytes(b"")
    (work / f"{PREFIX}not-hex-at-all").mkdir()
    live_fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(live_fd, fcntl.LOCK_EX)
        Store(s3_url).download("d@1", work / "out2")
    finally:
        os.close(live_fd)
    assert _same_files(src, work / "out2")
    assert sorted(os.listdir(work)) == sorted(["canary", "out2", live.name, f"{PREFIX}{'b' * 16}",
                                               f"{PREFIX}{'c' * 16}", f"{PREFIX}not-hex-at-all"])
    assert os.listdir(work / "canary") == []


def test_a_server_that_dies_before_the_commit_is_remote_unavailable_naming_the_endpoint_not_a_lost_lease(
        private_server: Any, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from artifactkit.errors import LeaseLostError, RemoteUnavailableError
    from artifactkit.store.s3 import transfer
    from artifactkit.store.s3.leases import LeasePolicy

    endpoint = private_server.endpoint.url
    url = f"s3://{private_server.endpoint.bucket}/dead"
    policy = LeasePolicy(ttl_s=1.0)
    real_flush = transfer.BucketTxn.flush

    def flush_then_die(*args: Any) -> None:
        real_flush(*args)
        private_server.stop()
        time.sleep(policy.ttl_s)  # the outage: longer than ttl / 2, so no refresh can have succeeded since

    monkeypatch.setattr(transfer.BucketTxn, "flush", flush_then_die)
    with pytest.raises(RemoteUnavailableError) as caught:
        Store(url, policy=policy).publish(_tree(fast_tmp / "src", 2), "p")
    assert not isinstance(caught.value, LeaseLostError)
    assert endpoint in str(caught.value), caught.value


def test_a_lease_that_could_not_be_refreshed_because_the_server_died_says_so_naming_the_endpoint(
        private_server: Any) -> None:
    from artifactkit.errors import LeaseLostError, RemoteUnavailableError
    from artifactkit.store.s3.leases import LeasePolicy, publish_lease
    from artifactkit.store.s3.objects import Bucket

    endpoint = private_server.endpoint.url
    policy = LeasePolicy(ttl_s=1.0)
    with publish_lease(Bucket(private_server.endpoint.bucket, "lease/"), policy) as lease:
        private_server.stop()
        time.sleep(policy.ttl_s)  # the outage: past ttl / 2, no refresh can have succeeded since
        with pytest.raises(RemoteUnavailableError) as caught:
            lease.check()
    assert not isinstance(caught.value, LeaseLostError)
    assert endpoint in str(caught.value) and "could not be refreshed" in str(caught.value), caught.value


def test_the_sweep_leaves_an_abandoned_looking_blob_dir_of_another_user_alone(s3_url: str, fast_tmp: Path) -> None:
    from tests.support.capability import require_real_root

    require_real_root("make a directory another user owns")
    src = _tree(fast_tmp / "src", 1)
    Store(s3_url).publish(src, "d")
    work = fast_tmp / "work"
    work.mkdir()
    foreign = work / f"{PREFIX}{'d' * 16}"
    foreign.mkdir(0o700)
    (foreign / "theirs").write_bytes(b"")
    os.chown(foreign / "theirs", 65534, 65534)
    os.chown(foreign, 65534, 65534)  # unlocked, pattern-exact: only its owner says it is not ours
    Store(s3_url).download("d@1", work / "out")
    assert sorted(os.listdir(work)) == [foreign.name, "out"] and os.listdir(foreign) == ["theirs"]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_bucket_manifest_claiming_a_file_past_the_size_limit_is_refused_before_any_blob_is_fetched(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    # A writer of the bucket composes a huge object from copied parts for little (UploadPartCopy) and claims it:
    # the single-file limit refuses the claim at the parse, before any GET (issue 48, class 7).
    from artifactkit.errors import ManifestLimitError
    from artifactkit.manifest.limits import FILE_BYTES_SETTING, MAX_FILE_BYTES
    from tests.support.engines import running_on
    from tests.support.hostile_manifest import body, doc, file_entry
    from tests.support.hostile_store import forge_manifest, put_blob

    store = Store(s3_url)
    put_blob(store, "cd" * 32, b"x")
    forge_manifest(store, "demo", 1, body(doc(file_entry(size=2**62, sha256="cd" * 32, extents=[]))))
    fetched: list[str] = []
    real_stream = objects.Bucket.stream

    def counted(self: Any, key: str, **kw: Any) -> Any:
        fetched.append(key)
        return real_stream(self, key, **kw)
    monkeypatch.setattr(objects.Bucket, "stream", counted)
    with running_on(engine), pytest.raises(ManifestLimitError) as caught:
        store.download("demo", fast_tmp / "out")
    assert (caught.value.limit, caught.value.actual, caught.value.setting) == (MAX_FILE_BYTES, 2**62,
                                                                               FILE_BYTES_SETTING)
    assert not [key for key in fetched if key.startswith("blobs/")] and not (fast_tmp / "out").exists()

"""The sealed blobs' moves into ``blobs/``: on a thread of their own from the seal to the flush, and
whatever goes wrong meanwhile, nothing becomes visible that a manifest could refer to half-stored.

``LocalTxn.seal`` makes the staged blobs durable (the barrier) and starts the executor's ``move_files`` on a
thread; ``flush`` waits for it before the manifest is written and fsynced. The order itself is checked from the
outside by ``tests/store/faults/test_durability.py`` (``no-manifest-fsync`` is the broken variant of the
manifest's own fsync) and by the kill points of ``tests/store/faults/test_crash.py``.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from artifactkit import ManifestLimitError, Store
from artifactkit.conformance.corpus import materialize
from artifactkit.engine.content import write_staged
from artifactkit.engine.reference.lists import ReadList
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import Staged, staging_name
from artifactkit.manifest.limits import MANIFEST_BYTES_SETTING
from artifactkit.store import blob_moves
from artifactkit.store.backend import Mover
from artifactkit.store.local_backend import LocalTxn
from tests.support.engines import ENGINE_NAMES, running_on


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_move_files_replaces_an_existing_name_and_names_both_ends_of_a_failed_move(fast_tmp: Path,
                                                                                   engine: str) -> None:
    src, dst = fast_tmp / "from", fast_tmp / "to"
    src.mkdir()
    dst.mkdir()
    for i in range(300):
        (src / f"blob-{i}").write_text(str(i))
    (dst / "d7").write_text("an identical blob a concurrent publisher committed first")
    src_fd, dst_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY), os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with running_on(engine), engine_for(2, "publish") as executor:
            executor.move_files(src_fd, dst_fd, [(f"blob-{i}", f"d{i}") for i in range(300)])
            assert os.listdir(src) == []
            assert (dst / "d7").read_text() == "7" and len(os.listdir(dst)) == 300
            with pytest.raises(FileNotFoundError) as caught:
                executor.move_files(src_fd, dst_fd, [("blob-0", "d0")])
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    assert (caught.value.errno, caught.value.filename, caught.value.filename2) == (errno.ENOENT, "blob-0", "d0")


def _sealed_with(move: Mover, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every publish's transaction seals with ``move`` instead of its executor's."""
    real = LocalTxn.seal
    monkeypatch.setattr(LocalTxn, "seal", lambda self, _: real(self, move))


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_move_that_fails_fails_the_publish_with_its_error_and_no_version(fast_tmp: Path, engine: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    moved: list[str] = []

    def full_disk(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        os.rename(moves[0][0], moves[0][1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        moved.append(moves[0][1])  # each mover (the thread, the publishing thread helping) may get this far once
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), moves[1][0], None, moves[1][1])

    _sealed_with(full_disk, monkeypatch)
    with running_on(engine), pytest.raises(OSError) as caught:
        store.publish(fast_tmp / "src", "demo")
    assert caught.value.errno == errno.ENOSPC
    assert store.list() == [] and os.listdir(fast_tmp / "store" / "staging") == []
    report = store.verify()
    assert report.ok, report
    assert moved and sorted(store.gc().removed_blobs) == sorted(moved)  # what moved is garbage: nothing refers to it


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_manifest_refused_in_its_assembly_moves_nothing_and_leaves_nothing(
        fast_tmp: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The manifest and its tree objects are made before the seal (the one barrier covers the objects too): one the
    # readers would refuse ends the publish before any blob moves, and the staging directory goes with it.
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    moved: list[int] = []

    def counted(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        moved.append(len(moves))

    _sealed_with(counted, monkeypatch)
    monkeypatch.setenv(MANIFEST_BYTES_SETTING, "64")  # every tree object is larger
    with running_on(engine), pytest.raises(ManifestLimitError, match="tree object"):
        store.publish(fast_tmp / "src", "demo")
    monkeypatch.delenv(MANIFEST_BYTES_SETTING)
    assert moved == [] and os.listdir(fast_tmp / "store" / "staging") == []
    assert store.list() == [] and store.verify().ok and store.gc().removed_blobs == []


def test_a_failed_move_is_noted_on_the_error_that_ended_the_publish_meanwhile(fast_tmp: Path) -> None:
    # From the seal to the flush the moves run on their own thread: an error that ends the publish meanwhile
    # (a Ctrl-C, the manifest's own write) is raised with the moves' failure noted on it, never lost.
    def broken(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), "blob-staged")

    store = Store(fast_tmp / "store")
    with store._open(create=True, writes=True) as opened, opened.publishing() as (_, txn):
        write_staged(txn.stage_fd, staging_name(0), b"x")
        txn.add(ReadList([Staged(0, "a" * 64, True, None, None, True)]))
        txn.seal(broken)
        ended = KeyboardInterrupt()
        txn.settle(ended)
    assert ended.__notes__ == ["moving the staged blobs into blobs/ failed too: "
                               f"OSError: [Errno {errno.EIO}] Input/output error: 'blob-staged'"]


def test_a_transaction_refuses_a_flush_before_its_seal_and_a_blob_after_it(fast_tmp: Path) -> None:
    store = Store(fast_tmp / "store")
    with store._open(create=True, writes=True) as opened, opened.publishing() as (_, txn):
        with pytest.raises(RuntimeError, match="flushed before it was sealed"):
            txn.flush(b"{}")
        txn.seal(lambda *_: None)
        with pytest.raises(RuntimeError, match="added to a sealed"):
            txn.add([])


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_moves_go_a_bounded_number_a_call_and_every_blob_arrives(fast_tmp: Path, engine: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    materialize("basic", fast_tmp / "src")
    calls: list[int] = []
    real = LocalTxn.seal

    def counted_seal(self: LocalTxn, move: Mover) -> None:
        def counted(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
            calls.append(len(moves))
            move(src_fd, dst_fd, moves)
        real(self, counted)

    monkeypatch.setattr(blob_moves, "MOVES_PER_CALL", 2)
    monkeypatch.setattr(LocalTxn, "seal", counted_seal)
    store = Store(fast_tmp / "store")
    with running_on(engine):
        ref = store.publish(fast_tmp / "src", "demo")
        store.download(ref, fast_tmp / "out")
    assert len(calls) >= 2 and max(calls) == 2, calls
    assert sum(calls) == len(os.listdir(fast_tmp / "store" / "blobs")) and store.verify().ok


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_barrier_runs_only_where_a_blob_was_staged(fast_tmp: Path, engine: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The barrier makes staged blobs durable before they move; a publish whose every blob is stored already
    # moves none, and every blob in blobs/ passed its own publish's barrier first. On a disk a syncfs flushes
    # the whole filesystem's dirty data, the other programs' too, so the unchanged re-publish (a CI cache) skips it.
    src = fast_tmp / "src"
    materialize("basic", src)
    store = Store(fast_tmp / "store")
    barriers: list[str] = []
    real = LocalTxn.barrier

    def counted(self: LocalTxn) -> None:
        barriers.append("syncfs")
        real(self)

    monkeypatch.setattr(LocalTxn, "barrier", counted)
    with running_on(engine):
        store.publish(src, "demo")
        assert barriers == ["syncfs"]
        store.publish(src, "copy")  # every blob stored: nothing staged
        store.publish(src, "demo", stat_cache=True)
        store.publish(src, "demo", stat_cache=True)  # the cache's unchanged tree: its recorded manifest
        assert barriers == ["syncfs"]
        (src / "fresh").write_bytes(b"content no blob holds yet")
        store.publish(src, "demo")
    assert barriers == ["syncfs", "syncfs"]
    report = store.verify()
    assert report.ok, report


def _cpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """The cores the moves see this process may run on (a CI runner may have either count)."""
    monkeypatch.setattr(blob_moves, "usable_cores", lambda: count)


def _calls_by_thread(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, *, cpus: int) -> list[bool]:
    """Publish ``basic`` a blob a call; per call, whether the publishing thread made it. The moving thread's first
    call waits (up to 10 s, with two CPUs) for one by the publishing thread, so a publishing thread that helps always
    gets one."""
    materialize("basic", fast_tmp / "src")
    publisher, helped = threading.get_ident(), threading.Event()
    made: list[bool] = []

    def move(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        mine = threading.get_ident() == publisher
        if mine:
            helped.set()
        elif not made and cpus > 1:
            helped.wait(timeout=10)
        made.append(mine)
        for src, dst in moves:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)

    _sealed_with(move, monkeypatch)
    _cpus(monkeypatch, cpus)
    monkeypatch.setattr(blob_moves, "MOVES_PER_CALL", 1)
    store = Store(fast_tmp / "store")
    ref = store.publish(fast_tmp / "src", "demo")
    store.download(ref, fast_tmp / "out")
    assert store.verify().ok and len(made) >= 3
    return made


def test_with_a_second_cpu_the_publishing_thread_takes_moves_once_its_manifest_is_assembled(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _calls_by_thread(fast_tmp, monkeypatch, cpus=2)
    assert True in made and False in made, made


def test_on_one_cpu_the_moving_thread_makes_every_move(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert True not in _calls_by_thread(fast_tmp, monkeypatch, cpus=1)


@pytest.mark.parametrize("raised", [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "blob-0"), KeyboardInterrupt()])
def test_a_helping_move_that_fails_or_is_interrupted_ends_the_publish_with_no_version(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> None:
    materialize("basic", fast_tmp / "src")
    publisher, helped, thread_moved = threading.get_ident(), threading.Event(), []

    def move(src_fd: int, dst_fd: int, moves: Sequence[tuple[str, str]]) -> None:
        if threading.get_ident() == publisher:
            helped.set()
            raise raised
        if not thread_moved:  # else the moving thread may take every chunk before the publishing thread asks
            helped.wait(timeout=10)
        for src, dst in moves:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        thread_moved.append(len(moves))

    _sealed_with(move, monkeypatch)
    _cpus(monkeypatch, 2)
    monkeypatch.setattr(blob_moves, "MOVES_PER_CALL", 1)
    store = Store(fast_tmp / "store")
    with pytest.raises(type(raised)):
        store.publish(fast_tmp / "src", "demo")
    assert store.list() == [] and os.listdir(fast_tmp / "store" / "staging") == []
    report = store.verify()
    assert report.ok, report
    assert len(store.gc().removed_blobs) == sum(thread_moved)  # what moved is garbage: nothing refers to it

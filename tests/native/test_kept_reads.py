"""A publish's reads kept in the core (``engine/native_values.py``'s ``KeptReads``, ``native/src/py/stage.rs``): the
manifest and the moves into ``blobs/`` take them from the state, no ``Staged`` is made of them on the way, and
where something does ask (the reference's ``move_files``, a failure) it gets what the reference's path gives.
The values themselves are held to the reference's by ``test_stage_differential.py`` (``stage_kept``)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.engine.reference.engine import PythonEngine
from artifactkit.engine.reference.lists import ReadList
from artifactkit.engine.values import ReadBatch, Reads, Staged
from artifactkit.store import blob_moves
from artifactkit.store.local_backend import LocalTxn
from tests.native.trees import File, build
from tests.support.engines import running_on


def _tree(src: Path, count: int) -> None:
    # Every fifth file has one content (the first's): staged once, its later reads not moved.
    src.mkdir()
    build(src, [File(f"d{i % 3}/f{i:03d}", b"%d\n" % (i if i % 5 else 0)) for i in range(count)],
          dirs=["d0", "d1", "d2"])


def test_a_native_publish_moves_its_blobs_by_ranges_of_the_state_and_makes_no_staged_of_its_reads(
        native: ModuleType, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from artifactkit import _native

    _tree(fast_tmp / "src", 250)
    calls: dict[str, int] = {"__getitem__": 0, "rename_staged": 0}

    def counting(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, counted)

    counting(native.KeptReads, "__getitem__")
    counting(_native, "rename_staged")
    monkeypatch.setattr(blob_moves, "MOVES_PER_CALL", 100)
    with running_on("native"):
        ref = Store(fast_tmp / "store-native").publish(fast_tmp / "src", "t")
    assert calls == {"__getitem__": 0, "rename_staged": 3}  # 250 reads, 100 a chunk, not one Staged made
    with running_on("python"):
        assert Store(fast_tmp / "store-python").publish(fast_tmp / "src", "t").digest == ref.digest
    blobs = sorted(os.listdir(fast_tmp / "store-native" / "blobs"))
    # 201 contents, and the tree's objects (the same in both stores: both engines' objects are byte-identical).
    assert blobs == sorted(os.listdir(fast_tmp / "store-python" / "blobs")) and len(blobs) > 201
    assert os.listdir(fast_tmp / "store-native" / "staging") == []


def _kept(native: ModuleType, fast_tmp: Path, count: int) -> tuple[Any, int, int]:
    """A state that kept ``count`` reads of a fresh tree, and the fds of its staging directory and a ``blobs/``."""
    from artifactkit import _native

    _tree(fast_tmp / "src", count)
    (fast_tmp / "txn").mkdir()
    (fast_tmp / "blobs").mkdir()
    walk = native.NativeEngine(1, "publish").walk
    captured = walk(str(fast_tmp / "src"), read_links=True, on_progress=lambda _: None)
    reads, _ = captured.entries.planned_reads(captured.identities)
    txn_fd = os.open(fast_tmp / "txn", os.O_RDONLY | os.O_DIRECTORY)
    blobs_fd = os.open(fast_tmp / "blobs", os.O_RDONLY | os.O_DIRECTORY)
    state = _native.StageState()
    native.stage_files(str(fast_tmp / "src"), txn_fd, blobs_fd, reads, threads=2, state=state)
    return state, txn_fd, blobs_fd


def test_a_range_of_staged_moves_is_the_pairs_the_reference_would_move_and_either_engine_moves_it(
        native: ModuleType, fast_tmp: Path) -> None:
    KeptReads, StagedMoves = native.KeptReads, native.StagedMoves  # noqa: N806 - the engine's classes
    state, txn_fd, blobs_fd = _kept(native, fast_tmp, 20)
    try:
        kept = KeptReads(state, 0, 20)
        pairs = [(found.path(), found.sha256) for found in kept if found.staged]
        by_seven = [[(kept[k].path(), kept[k].sha256) for k in range(at, min(at + 7, 20)) if kept[k].staged]
                    for at in (0, 7, 14)]
        assert [list(chunk) for chunk in kept.move_chunks(7)] == by_seven
        assert [pair for chunk in by_seven for pair in chunk] == pairs
        assert kept.staged_count() == len(pairs) == 17  # 20 files, 4 of them of one content
        first, rest = StagedMoves(state, 0, 7), StagedMoves(state, 7, 20)
        native.rename_files(first, src_dir_fd=txn_fd, dst_dir_fd=blobs_fd)  # the core, by the range
        PythonEngine(None, "publish").move_files(txn_fd, blobs_fd, rest)  # os.rename by the pairs
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)
    assert os.listdir(fast_tmp / "txn") == []
    for name, sha in pairs:
        assert hashlib.sha256((fast_tmp / "blobs" / sha).read_bytes()).hexdigest() == sha, name


def test_a_failed_move_of_a_range_names_both_ends_as_os_rename_does(native: ModuleType, fast_tmp: Path) -> None:
    KeptReads, StagedMoves = native.KeptReads, native.StagedMoves  # noqa: N806 - the engine's classes
    state, txn_fd, blobs_fd = _kept(native, fast_tmp, 6)
    try:
        staged = [found for found in KeptReads(state, 0, 6) if found.staged]
        os.unlink(staged[1].path(), dir_fd=txn_fd)  # gone from staging: its move fails, the one after never runs
        with pytest.raises(FileNotFoundError) as caught:
            native.rename_files(StagedMoves(state, 0, 6), src_dir_fd=txn_fd, dst_dir_fd=blobs_fd)
        with pytest.raises(IndexError, match="not kept"):
            native.rename_files(StagedMoves(state, 4, 9), src_dir_fd=txn_fd, dst_dir_fd=blobs_fd)
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)
    err = caught.value
    assert (err.errno, err.filename, err.filename2) == (errno.ENOENT, staged[1].path(), staged[1].sha256)
    assert os.listdir(fast_tmp / "blobs") == [staged[0].sha256]


class _Held(ReadBatch):
    """A batch of reads some other engine keeps, made of plain ones: a transaction sees only the door's type."""

    def __init__(self, found: list[Staged]) -> None:
        self.found = found

    def __len__(self) -> int:
        return len(self.found)

    def __getitem__(self, index: Any) -> Any:
        return self.found[index]

    def staged_count(self) -> int:
        return sum(found.staged for found in self.found)

    def move_chunks(self, per_call: int) -> Iterator[Sequence[tuple[str, str]]]:
        pairs = [(found.path(), found.sha256) for found in self.found if found.staged]
        return iter([pairs[at:at + per_call] for at in range(0, len(pairs), per_call)])


def test_batches_of_two_kinds_in_one_transaction_are_all_moved_after_the_barrier(fast_tmp: Path) -> None:
    txn_dir, blobs_dir = fast_tmp / "txn", fast_tmp / "blobs"
    txn_dir.mkdir()
    blobs_dir.mkdir()
    sha = hashlib.sha256(b"same").hexdigest()
    for position in (0, 1, 2):
        (txn_dir / f"blob-{position}").write_bytes(b"same" if position < 2 else b"other")
    other = hashlib.sha256(b"other").hexdigest()
    txn = object.__new__(LocalTxn)  # only what add/seal/settle touch: no store around it
    txn._held, txn._moving = [], None
    txn.stage_fd = os.open(txn_dir, os.O_RDONLY | os.O_DIRECTORY)
    txn.dirs = type("Dirs", (), {"blobs": os.open(blobs_dir, os.O_RDONLY | os.O_DIRECTORY)})()
    barriers: list[int] = []
    txn.barrier = lambda: barriers.append(len(os.listdir(blobs_dir)))  # type: ignore[method-assign]
    try:
        txn.add(_Held([Staged(0, sha, True, None, None, True), Staged(2, other, True, None, None, True)]))
        txn.add(ReadList([Staged(1, sha, True, None, None, True)]))  # the same content from the reference's
        txn.seal(PythonEngine(None, "publish").move_files)
        txn.settle()
    finally:
        os.close(txn.stage_fd)
        os.close(txn.dirs.blobs)
    assert barriers == [0]  # once, before any blob was visible
    assert sorted(os.listdir(blobs_dir)) == sorted([sha, other])
    assert os.listdir(txn_dir) == []


def test_reads_join_batches_in_order_and_index_across_them() -> None:
    def staged(position: int) -> Staged:
        return Staged(position, f"{position:064x}", True, None, None, True)

    reads = Reads()
    for batch in (ReadList([staged(0), staged(1)]), ReadList(), _Held([staged(2)]), ReadList([staged(3), staged(4)])):
        reads.add(batch)
    assert len(reads) == 5 and [r.position for r in reads] == [0, 1, 2, 3, 4]
    assert [reads[k].position for k in (0, 2, 3, -1, -5)] == [0, 2, 3, 4, 0]
    assert [r.position for r in reads[1:4]] == [1, 2, 3]
    for outside in (5, -6):
        with pytest.raises(IndexError):
            reads[outside]

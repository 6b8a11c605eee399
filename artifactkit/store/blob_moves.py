"""A local publish's staged blobs moved into ``blobs/`` after its barrier: on a thread of their own while the
manifest is assembled, and by the publishing thread too once that is done.

The moves are the engine's ``move_files`` (:data:`~artifactkit.store.backend.Mover`), called a chunk of
:data:`MOVES_PER_CALL` at a time from one shared queue. Started by ``LocalTxn.seal`` right after the one
``syncfs``, so every name they make visible refers to durable bytes; ``LocalTxn.flush`` waits for them before
the manifest is written.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Final, Protocol

import attrs

from artifactkit.engine.protocol import usable_cores
from artifactkit.store.backend import Mover

#: Blobs one ``move_files`` call renames: a call's names are made just before it, so few are alive beside the
#: manifest's assembly (memory: tests/store/test_publish_memory.py), while a call's fixed cost (its names
#: converted, the GIL released and taken back) stays small beside its renames' 3-8 ms.
MOVES_PER_CALL: Final = 1024


class Moving:
    """Every staged blob moved into ``blobs/`` by ``move``: a thread of its own starts at once, and the caller of
    :meth:`wait` with ``helping`` takes chunks from the same queue until it is empty. Why the second mover: on
    ``many`` (10,000 blobs) the moves outlast the manifest's assembly, and the publishing thread only waited for
    them; renames from two threads share the filesystem's rename lock but still overlap the rest of each call
    (docs/performance.md, the renames' study). Why only once the manifest is done: a second mover beside the assembly
    takes a core from it (a 100,000-file CLI publish was slower so), and why only with a second CPU: on one, two
    movers only take turns. A failed chunk stops every mover at its next chunk; :meth:`wait` returns the first
    failure."""

    def __init__(self, move: Mover, src_fd: int, dst_fd: int, held: Sequence[HeldMoves]) -> None:
        self._move, self._src_fd, self._dst_fd = move, src_fd, dst_fd
        self._pending = _chunks(held)
        self._lock = threading.Lock()  # the queue, and the first failure
        self._failed: BaseException | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="artifactkit-blob-moves", daemon=True)
        self._thread.start()

    def _chunk(self) -> Sequence[tuple[str, str]] | None:
        with self._lock:
            return None if self._stopped else next(self._pending, None)

    def _stop(self, failed: BaseException | None) -> None:
        with self._lock:
            self._stopped = True
            if failed is not None and self._failed is None:
                self._failed = failed

    def _take_chunks(self) -> None:
        while (moves := self._chunk()) is not None:
            try:
                self._move(self._src_fd, self._dst_fd, moves)
            except Exception as err:  # noqa: BLE001 - the first failure, handed to wait()'s caller
                self._stop(err)

    def _run(self) -> None:
        try:
            self._take_chunks()
        except BaseException as err:  # noqa: BLE001 - handed to the publishing thread, which raises it
            self._stop(err)

    def wait(self, *, helping: bool = False, cancel: bool = False) -> BaseException | None:
        """Take chunks here too if ``helping``, then join the thread (a Ctrl-C meanwhile stops both movers and is
        raised once the thread ended: nothing may still rename out of a staging directory being removed) and
        return the first failure, if any. ``cancel``: stop both at their next chunk first (the publish failed)."""
        if cancel:  # the publish failed or was interrupted: what is not moved yet stays staged, to be removed
            self._stop(None)
        interrupted: BaseException | None = None
        if helping and usable_cores() > 1:  # on one CPU a second mover only takes turns with the first
            try:
                self._take_chunks()
            except BaseException as err:  # noqa: BLE001 - a Ctrl-C: raised below, once the thread ended
                self._stop(None)
                interrupted = err
        while self._thread.is_alive():
            try:
                self._thread.join()
            except KeyboardInterrupt as err:
                self._stop(None)
                interrupted = err
        if interrupted is not None:
            raise interrupted
        return self._failed


def _chunks(held: Sequence[HeldMoves]) -> Iterator[Sequence[tuple[str, str]]]:
    """The moves in chunks of at most :data:`MOVES_PER_CALL`, none empty: each batch's own, in order."""
    for batch in held:
        yield from (chunk for chunk in batch.move_chunks(MOVES_PER_CALL) if len(chunk))


class HeldMoves(Protocol):
    """What a transaction holds until its barrier: a batch of reads (:class:`~artifactkit.engine.values.ReadBatch`)
    or the moves of some, spilled (:class:`SpilledMoves`)."""

    def staged_count(self) -> int: ...

    def move_chunks(self, per_call: int) -> Iterator[Sequence[tuple[str, str]]]: ...


@attrs.frozen
class SpilledMoves:
    """``count`` moves kept in the file ``name`` of the staging directory, ``staging-name digest`` a line."""

    stage_fd: int
    name: str
    count: int

    def staged_count(self) -> int:
        return self.count

    def move_chunks(self, per_call: int) -> Iterator[list[tuple[str, str]]]:
        fd = os.open(self.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.stage_fd)
        with os.fdopen(fd, encoding="ascii") as lines:
            while chunk := [_pair(line) for line in itertools.islice(lines, per_call)]:
                yield chunk


def _pair(line: str) -> tuple[str, str]:
    src, _, dst = line.rstrip("\n").partition(" ")
    return src, dst


def spill(stage_fd: int, held: list[HeldMoves]) -> list[HeldMoves]:
    """``held`` with its batches' moves in a new file of staging (:class:`SpilledMoves`), the batches let go. Why: a
    publish in parts (:mod:`~artifactkit.store.publish_parts`) holds every part's moves until its one barrier, and
    the batches, as their engines hold them, keep each read's facts (100-200 bytes a file); a move in the file is
    about 80 bytes of staging, none of memory. Only this process reads it back; a publish that dies leaves it in its
    staging, which is removed with the rest (or by ``gc``)."""
    spilled: list[HeldMoves] = [batch for batch in held if isinstance(batch, SpilledMoves)]
    chunks = _chunks([batch for batch in held if not isinstance(batch, SpilledMoves)])
    first = next(chunks, None)
    if first is None:
        return spilled
    name = f"moves-from-{first[0][0]}"  # a staging name is in one batch only: the file's name is new
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=stage_fd)
    count = 0
    with os.fdopen(fd, "w", encoding="ascii") as out:
        for chunk in itertools.chain((first,), chunks):
            out.writelines(f"{src} {dst}\n" for src, dst in chunk)
            count += len(chunk)
    return [*spilled, SpilledMoves(stage_fd, name, count)]

"""The reference's ``hash_while_copying`` (``artifactkit/engine/content.py``): the kernel copies on one thread
while this one reads the destination back and hashes it; the same cases as the core's own
(``native/src/read/hash_while_copying.rs``).

A destination cut short behind the copy (another writer of the store truncates a staged file) must end the
digest where the destination ends: before this test the hasher waited forever for bytes that were gone (a
busy loop, found while moving the core's read-back onto its hasher)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from artifactkit._syscalls import copy_range
from artifactkit.engine import content

CUT_WAIT_S = 60  # a hang is the failure: the copy of 16 MiB on tmpfs takes milliseconds


def _pattern(length: int) -> bytes:
    return bytes(i * 7 % 251 for i in range(251)) * (length // 251) + bytes(i * 7 % 251 for i in range(length % 251))


def _copy(tmp_path: Path, data: bytes, size: int) -> tuple[str, int, bytes]:
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        sha, count = content.hash_while_copying(src, dst, size)
    finally:
        os.close(src)
        os.close(dst)
    return sha, count, (tmp_path / "dst").read_bytes()


@pytest.mark.parametrize("length", [0, 1, content.CHUNK - 1, content.CHUNK + 1, content.COPY_CHUNK + 5])
def test_the_digest_is_of_what_landed(tmp_path: Path, length: int) -> None:
    data = _pattern(length)
    assert _copy(tmp_path, data, length) == (hashlib.sha256(data).hexdigest(), length, data)


def test_one_byte_more_shows_a_source_that_grew(tmp_path: Path) -> None:
    data = _pattern(content.CHUNK + 3)
    _, count, _ = _copy(tmp_path, data, len(data) - 1)
    assert count == len(data)


def test_a_destination_cut_short_behind_the_copy_ends_the_digest_where_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cut lands within the last chunk's copy, before the hasher hears it landed; the probe for one byte more
    # copies nothing, so the destination stays cut (as in the core's test of the same name).
    chunk = content.COPY_CHUNK
    data = _pattern(2 * chunk)
    cut = chunk + 12345
    def cut_within_the_last_copy(src: int, dst: int, count: int, offset: int = 0) -> int:
        n = copy_range(src, dst, count, offset=offset)
        if offset == chunk:
            os.ftruncate(dst, cut)
        return n

    monkeypatch.setattr(content, "copy_range", cut_within_the_last_copy)
    outcome: list[tuple[str, int, bytes]] = []
    copier = threading.Thread(target=lambda: outcome.append(_copy(tmp_path, data, len(data))), daemon=True)
    copier.start()
    copier.join(CUT_WAIT_S)
    assert outcome, f"hash_while_copying never ended within {CUT_WAIT_S} s of a destination cut behind the copy"
    assert outcome[0] == (hashlib.sha256(data[:cut]).hexdigest(), cut, data[:cut])


def test_a_destination_cut_between_chunks_stops_the_copy_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cut after the second of three chunks: were the third copied, it would extend the file over a hole read as
    # zeros, a full length and a digest of bytes the source never held (found in review: it did).
    chunk = content.COPY_CHUNK
    data = _pattern(3 * chunk)
    cut = chunk + 12345

    def cut_after_the_second_copy(src: int, dst: int, count: int, offset: int = 0) -> int:
        n = copy_range(src, dst, count, offset=offset)
        if offset == chunk:
            os.ftruncate(dst, cut)
        return n

    monkeypatch.setattr(content, "copy_range", cut_after_the_second_copy)
    outcome: list[tuple[str, int, bytes]] = []
    copier = threading.Thread(target=lambda: outcome.append(_copy(tmp_path, data, len(data))), daemon=True)
    copier.start()
    copier.join(CUT_WAIT_S)
    assert outcome, f"hash_while_copying never ended within {CUT_WAIT_S} s of a destination cut between chunks"
    assert outcome[0] == (hashlib.sha256(data[:cut]).hexdigest(), cut, data[:cut])


def test_where_no_thread_starts_the_copy_then_its_read_back_run_here(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # What Thread.start raises where the system refuses a thread (RLIMIT_NPROC, a cgroup's pids.max): the
    # native core does the same work on one thread then (tests/native/test_threads_refused.py, a real refusal).
    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    data = _pattern(2 * content.COPY_CHUNK + 99)
    assert _copy(tmp_path, data, len(data)) == (hashlib.sha256(data).hexdigest(), len(data), data)

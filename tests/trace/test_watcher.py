"""The inotify watcher, the audit-hook self tracer and the access accounting, on real directories."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import inotify_simple
import pytest

from artifactkit.trace.watcher import InotifyMask, SelfOpenTracer, Watcher, WatchEvent, mask_names, split_accesses


def _read(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 10)
    finally:
        os.close(fd)


def test_mask_values_are_the_kernel_ones_inotify_simple_uses() -> None:
    for flag in inotify_simple.flags:
        if flag.name and bin(flag.value).count("1") == 1:  # single bits; CLOSE, MOVE are unions
            assert InotifyMask["IN_" + flag.name].value == flag.value


def test_watcher_counts_opens_of_existing_and_newly_created_nested_directories(fast_tmp: Path) -> None:
    (fast_tmp / "a").mkdir()
    (fast_tmp / "a" / "f").write_bytes(b"x")
    watcher = Watcher(fast_tmp, [fast_tmp])
    _read(fast_tmp / "a" / "f")
    nested = fast_tmp / "a" / "new" / "deeper"
    nested.mkdir(parents=True)
    # stop() drains every queued event, so the IN_CREATE of "new" is handled by then; handling it
    # watches "new" and, listing it, "deeper" (created before the watch could exist).
    summary = watcher.stop()
    assert summary.watches_added == 4  # root, a, a/new, a/new/deeper
    assert summary.as_dict()["IN_OPEN"] >= 1
    assert summary.as_dict()["IN_ACCESS"] >= 1
    assert summary.opens >= 1
    assert summary.overflows == 0
    assert summary.first_ns is not None


def test_watcher_converts_events_to_frozen_values_with_relative_paths(fast_tmp: Path) -> None:
    (fast_tmp / "d").mkdir()
    (fast_tmp / "d" / "file").write_bytes(b"x")
    watcher = Watcher(fast_tmp, [fast_tmp])
    _read(fast_tmp / "d" / "file")
    watcher.stop()
    events = watcher.recent()
    opened = [e for e in events if e.path == "d/file" and e.mask & InotifyMask.IN_OPEN]
    assert opened, events
    event = opened[0]
    assert isinstance(event, WatchEvent)
    assert isinstance(event.mask, InotifyMask)
    assert not event.is_dir
    assert event.timestamp_ns > 0
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.path = "elsewhere"  # type: ignore[misc]
    assert not any(os.path.isabs(e.path) for e in events)


def test_a_directory_open_is_counted_once_although_two_watches_report_it(fast_tmp: Path) -> None:
    (fast_tmp / "sub").mkdir()
    watcher = Watcher(fast_tmp, [fast_tmp])
    fd = os.open(fast_tmp / "sub", os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)
    summary = watcher.stop()
    assert summary.as_dict()["IN_OPEN"] == 2  # the parent's watch (named) and the dir's own
    assert summary.opens == 1


def test_mask_names_use_kernel_names() -> None:
    assert mask_names(InotifyMask.IN_OPEN | InotifyMask.IN_ISDIR) == ["IN_OPEN", "IN_ISDIR"]


def test_self_tracer_counts_own_opens_under_its_roots_only(fast_tmp: Path, tmp_path: Path) -> None:
    inside, outside = fast_tmp / "in", tmp_path / "out"
    inside.write_bytes(b"x")
    outside.write_bytes(b"x")
    with SelfOpenTracer([fast_tmp]) as tracer:
        _read(inside)
        inside.read_bytes()
        _read(outside)
        list(os.scandir(fast_tmp))
    _read(inside)  # after the tracer ended: not counted
    assert tracer.opens == 3


def test_an_extra_reader_nobody_claims_is_unexplained() -> None:
    # 100 opens seen; this process claims 10 and the readers 80: 10 belong to nobody we know.
    split = split_accesses(observed=100, self_opens=10, reader_opens=80)
    assert (split.unexplained, split.unobserved) == (10, 0)


def test_missed_events_show_as_unobserved_not_as_negative_unexplained() -> None:
    split = split_accesses(observed=90, self_opens=10, reader_opens=85)
    assert (split.unexplained, split.unobserved) == (0, 5)

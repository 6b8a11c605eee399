"""A source that changes while it is published: a symlink retargeted between its ``lstat`` and its
``readlink``, a file swapped for a symlink between the scan and its read. Each is
:class:`SourceChangedError` naming the entry, never a manifest that pairs one link's times with another's
target, and never a raw ``OSError``.

A retargeted link is a new inode (a symlink's target cannot be changed in place: ``ln -sf`` and
``rename`` both make a new one), so the scan's ``lstat`` and the one after ``readlink`` differ.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit import SourceChangedError, Store
from artifactkit.engine.reference.scan import scan_tree
from artifactkit.store.publish import capture_source, publish_tree

T = 1_600_000_000_000_000_000
#: Two incarnations of the link ``l``: target -> the mtime it was given (a target of the same length too).
LINKS = {"target-a": T + 1, "target-b": T + 2, "other-target-that-is-longer": T + 3}


def _link(root: Path, name: str, target: str) -> None:
    """Point ``root/name`` at ``target`` as ``ln -sf`` would: a new link renamed over the old one."""
    tmp = root.parents[1] / f".{name}.tmp"  # outside the tree: a scan never lists it
    os.symlink(target, tmp)
    os.utime(tmp, ns=(T, LINKS.get(target, T)), follow_symlinks=False)
    os.rename(tmp, root / name)


def _source(tmp: Path) -> Path:
    src = tmp / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"content")
    _link(src / "d", "l", "target-a")
    return src


def _retarget_once(src: Path, target: str) -> Callable[[int], None]:
    done: list[bool] = []

    def on_progress(count: int) -> None:
        # Called after each directory's lstats, before any link is read: the window of the race.
        if not done and count >= 3:
            done.append(True)
            _link(src / "d", "l", target)
    return on_progress


@pytest.mark.parametrize("target", ["target-b", "other-target-that-is-longer"], ids=["same-length", "longer"])
def test_a_symlink_retargeted_between_its_lstat_and_its_readlink_is_source_changed(
        fast_tmp: Path, target: str) -> None:
    src = _source(fast_tmp)
    with pytest.raises(SourceChangedError, match=r"d/l") as caught:
        scan_tree(src, on_progress=_retarget_once(src, target))
    assert caught.value.path == "d/l"
    with pytest.raises(SourceChangedError, match=r"d/l"):
        capture_source(src, on_progress=_retarget_once(src, "target-a"))


def test_an_unchanged_symlink_is_read_with_its_own_times(fast_tmp: Path) -> None:
    src = _source(fast_tmp)
    link = next(e for e in scan_tree(src).entries if e.path == "d/l")
    assert (link.target, link.mtime_ns) == ("target-a", LINKS["target-a"])


def _swapping(action: Callable[[int], None]) -> tuple[threading.Thread, threading.Event, list[int]]:
    stop, swaps = threading.Event(), [0]

    def loop() -> None:
        while not stop.is_set():
            action(swaps[0])
            swaps[0] += 1
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, stop, swaps


def test_publishing_while_a_thread_retargets_a_link_never_pairs_one_links_times_with_anothers_target(
        fast_tmp: Path) -> None:
    src = _source(fast_tmp)
    store = Store(fast_tmp / "store")
    targets = list(LINKS)
    thread, stop, swaps = _swapping(lambda n: _link(src / "d", "l", targets[n % len(targets)]))
    outcomes: list[str] = []
    try:
        for _ in range(60):
            try:
                ref = store.publish(src, "demo")
            except SourceChangedError as err:
                assert err.path == "d/l", err
                outcomes.append("changed")
                continue
            link = next(e for e in store.manifest(ref).entries if e.path == "d/l")
            assert link.target is not None and link.mtime_ns == LINKS[link.target], link
            outcomes.append("published")
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 60, "the link was hardly retargeted while publishing"
    assert len(outcomes) == 60


def test_a_file_swapped_for_a_symlink_after_the_scan_is_source_changed(fast_tmp: Path) -> None:
    src = _source(fast_tmp)
    store = Store(fast_tmp / "store")
    store.layout.create()
    tree = capture_source(src)
    _link(src / "d", "f", "target-a")  # the file the scan saw is now a link
    with pytest.raises(SourceChangedError, match=r"d/f"), store.backend.open() as opened:
        publish_tree(opened, tree, "demo")
    assert store.list() == []


def test_publishing_while_a_thread_swaps_a_file_for_a_symlink_is_published_or_source_changed(
        fast_tmp: Path) -> None:
    """Whatever the moment of the swap, the publish either holds one consistent state or says the source
    changed: never ``ELOOP`` (``O_NOFOLLOW`` meeting the link) as a raw ``OSError``."""
    src = _source(fast_tmp)
    store = Store(fast_tmp / "store")

    def swap(n: int) -> None:
        if n % 2:
            _link(src / "d", "f", "target-a")
        else:
            (fast_tmp / ".f.new").write_bytes(b"content")  # outside the tree, as _link does
            os.rename(fast_tmp / ".f.new", src / "d" / "f")
    thread, stop, swaps = _swapping(swap)
    outcomes: list[str] = []
    try:
        for _ in range(60):
            try:
                store.publish(src, "demo")
                outcomes.append("published")
            except SourceChangedError as err:
                assert err.path is not None and err.path.endswith("d/f"), err
                outcomes.append("changed")
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 60 and len(outcomes) == 60

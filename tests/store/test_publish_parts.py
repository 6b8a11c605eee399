"""A publish in parts (the default over a part: ``store/publish_parts.py``) makes the objects one whole capture makes,
whatever the part size: parts of 1, 3 and 17 entries against ``capture_source`` + ``publish_tree``, on both engines,
over a tree whose path order is not a walk's in name order (``a.b`` < ``a/x`` < ``a0``), with hard links whose first
name comes out in a later directory and a later part, links, a FIFO, empty and nested directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.engine.reference.scan_parts import scan_parts
from artifactkit.store import publish_parts
from artifactkit.store.publish import capture_source, publish_tree
from tests.support.engines import ENGINE_NAMES, running_on

#: Later than any clock here: ``relatime`` moves no atime that is newer than the mtime and ctime, so the two
#: publishes of one source (whose link targets are read) capture the same times.
FUTURE_NS = 4_102_444_800 * 10**9


def _tricky_tree(root: Path) -> Path:
    src = root / "src"
    for directory in ("a", "a.b", "a/x.d", "a/x.d/deeper", "a0", "empty", "b/c/d"):
        (src / directory).mkdir(parents=True, exist_ok=True)
    for at, path in enumerate(("a-file", "a/p", "a/x", "a.b/q", "a0/r", "b/c/d/e", "z", "-first", "ü", "a/x.d/y")):
        (src / path).write_bytes(f"{path} {at}\n".encode() * (at + 1))
    os.link(src / "z", src / "a/x.d/z-link")  # "a/x.d/z-link" < "z": the first name comes out in a deeper directory
    os.link(src / "a/p", src / "a.b/p-link")  # "a.b/p-link" < "a/p": a later sibling's subtree holds the first name
    os.link(src / "a0/r", src / "a0/r2")
    os.symlink("../z", src / "a/to-z")
    os.symlink("a0/r", src / "r-link")
    os.link(src / "r-link", src / "a.b/r-link2")  # a hard link to a symlink
    os.mkfifo(src / "a/fifo")
    for path in sorted(src.rglob("*"), reverse=True):
        st = path.lstat()
        os.utime(path, ns=(FUTURE_NS, st.st_mtime_ns), follow_symlinks=False)
    os.utime(src, ns=(FUTURE_NS, src.stat().st_mtime_ns))
    return src


def _whole(store: Store, src: Path, name: str) -> str:
    with store._open(create=True) as opened:  # the whole capture, as a stat cache's publish takes it
        return publish_tree(opened, capture_source(src), name).digest


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("part_entries", [1, 3, 17])
def test_parts_make_the_objects_a_whole_capture_makes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str,
                                                      part_entries: int) -> None:
    src = _tricky_tree(tmp_path)
    monkeypatch.setattr(publish_parts, "PART_ENTRIES", part_entries)
    monkeypatch.setattr(publish_parts, "WHOLE_UP_TO", part_entries)
    with running_on(engine):
        store = Store(tmp_path / "store")
        in_parts = store.publish(src, "tree")
        whole = _whole(store, src, "tree")
        assert in_parts.digest == whole
        store.download(in_parts, tmp_path / "back")
    later_names = {entry.path: entry.hardlink for entry in store.manifest(in_parts).entries if entry.hardlink}
    assert later_names == {"z": "a/x.d/z-link", "a/p": "a.b/p-link", "a0/r2": "a0/r", "r-link": "a.b/r-link2"}


def test_parts_come_out_in_path_order_and_hold_no_more_than_asked(tmp_path: Path) -> None:
    src = _tricky_tree(tmp_path)
    parts = list(scan_parts(src, part_entries=3))
    paths = [entry.path for part in parts for entry in part.entries]
    assert paths == sorted(paths)
    assert len(paths) == len(set(paths)) == len(capture_source(src).entries)
    # A directory's entry waits for nothing: "a" < "a.b/..." < "a/" (a whole subtree) once made a part of 8.
    whole, rest = divmod(len(paths), 3)
    assert [len(part.entries) for part in parts] == [3] * whole + ([rest] if rest else [])


@pytest.mark.parametrize(("below", "walked_in_parts"), [(0, False), (1, True)])
def test_the_default_publish_takes_a_tree_whole_up_to_its_limit_and_in_parts_over_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, below: int, walked_in_parts: bool) -> None:
    src = _tricky_tree(tmp_path)
    monkeypatch.setattr(publish_parts, "WHOLE_UP_TO", len(capture_source(src).entries) - below)
    walks: list[int] = []
    real = publish_parts.scan_parts
    monkeypatch.setattr(publish_parts, "scan_parts", lambda *args, **kw: (walks.append(1), real(*args, **kw))[1])
    ref = Store(tmp_path / "store").publish(src, "tree")
    assert bool(walks) == walked_in_parts
    assert ref.digest == _whole(Store(tmp_path / "whole"), src, "tree")

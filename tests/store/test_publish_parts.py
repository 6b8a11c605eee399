"""A publish in parts (the default over a part: ``store/publish_parts.py``) makes the objects one whole capture makes,
whatever the part size: parts of 1, 3 and 17 entries against ``capture_source`` + ``publish_tree``, on both engines,
over a tree whose path order is not a walk's in name order (``a.b`` < ``a/x`` < ``a0``), with hard links whose first
name comes out in a later directory and a later part, links, a FIFO, empty and nested directories."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit import Store, assert_metadata_equal, capture_tree
from artifactkit.engine.reference import scan
from artifactkit.engine.reference import scan_parts as scan_parts_module
from artifactkit.engine.reference.scan_parts import scan_parts
from artifactkit.errors import SourceAtimesMovedWarning, UnsupportedFileType
from artifactkit.store import publish_parts
from artifactkit.store.publish import capture_source, publish_tree
from tests.support.engines import ENGINE_NAMES, require_engine, running_on
from tests.support.stores import staging_names

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


_CHILD = """
import json, os, sys, tracemalloc
from artifactkit import Store, assert_metadata_equal, capture_tree
from artifactkit.store import local_backend, publish_parts
publish_parts.PART_ENTRIES = publish_parts.WHOLE_UP_TO = 125
if sys.argv[3] == "unspilled":  # the guard taken away: every part's batches held until the barrier
    local_backend.LocalTxn.spill = lambda self: None
tracemalloc.start()
Store(sys.argv[2]).publish(sys.argv[1], "tree")
print(json.dumps(tracemalloc.get_traced_memory()[1]))
"""


def _traced_peak(root: Path, files: int, engine: str, spill: str) -> int:
    src = root / f"src-{files}"
    for at in range(files):
        (src / f"d{at // 100:03}").mkdir(parents=True, exist_ok=True)
        (src / f"d{at // 100:03}" / f"f{at:05}").write_bytes(b"%08d" % at * 32)
    env = {**os.environ, "ARTIFACTKIT_ENGINE": engine}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(root / f"store-{files}-{spill}"), spill],
                         env=env, check=True, capture_output=True, text=True).stdout
    return int(json.loads(out))


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_publish_in_parts_holds_a_part_not_the_tree(fast_tmp: Path, engine: str) -> None:
    """Parts of 125 entries: 2,000 files peak within 200 KB of 500 (measured: 64 KB on the reference, none on the
    native engine; whole, each entry is about 1.5 KB: 2.2 MB more); without the spill of each part's batches every
    read's ``Staged`` stays until the barrier (473 KB more), and it fails."""
    require_engine(engine)
    small, large = (_traced_peak(fast_tmp, files, engine, "spilled") for files in (500, 2000))
    assert large - small < 200_000, f"{small:,} bytes at 500 files, {large:,} at 2,000"
    if engine == "python":  # the native engine's batches are the core's, which tracemalloc does not see
        assert _traced_peak(fast_tmp, 2000, engine, "unspilled") - small > 300_000


@pytest.mark.parametrize("in_parts", [False, True])
def test_listings_without_o_noatime_are_counted_in_parts_as_whole(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  in_parts: bool) -> None:
    """A reader refused ``O_NOATIME`` moves each directory's atime by listing it (fresh: relatime moves an atime no
    newer than the mtime); in parts a directory may be listed after its part was read, so the walk looks right after
    each listing. Both ways the warning counts every directory, the root too."""
    src = fast_tmp / "src"
    for at in range(12):
        (src / f"d{at % 4}" / "sub").mkdir(parents=True, exist_ok=True)
        (src / f"d{at % 4}" / "sub" / f"f{at}").write_bytes(b"x")
    refused = lambda path, flags: (os.open(path, flags), False)  # noqa: E731 - a reader who may not use O_NOATIME
    monkeypatch.setattr(scan_parts_module if in_parts else scan, "open_noatime", refused)
    if in_parts:
        monkeypatch.setattr(publish_parts, "WHOLE_UP_TO", 3)
        monkeypatch.setattr(publish_parts, "PART_ENTRIES", 3)
    with running_on("python"), pytest.warns(SourceAtimesMovedWarning) as warned:
        Store(fast_tmp / "store").publish(src, "tree")
    assert [(w.message.directories, w.message.files) for w in warned  # type: ignore[union-attr]
            if isinstance(w.message, SourceAtimesMovedWarning)] == [(9, 0)]


@pytest.mark.parametrize("part_entries", [1, 2, 3])
def test_a_socket_in_the_last_directory_is_refused_wherever_the_parts_end(tmp_path: Path, part_entries: int) -> None:
    src = tmp_path / "src"
    (src / "z").mkdir(parents=True)
    (src / "a").write_bytes(b"a")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(src / "z" / "sock"))
        with pytest.raises(UnsupportedFileType, match="sock"):
            list(scan_parts(src, part_entries=part_entries))


def test_a_publish_in_parts_into_either_backend_makes_the_whole_captures_objects_and_downloads_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, any_store: Store) -> None:
    """A bucket's transaction sends each part's blobs as they come (its ``spill`` holds nothing); a directory's
    keeps their moves in its staging until the barrier, and nothing is left there after."""
    src = _tricky_tree(tmp_path)
    monkeypatch.setattr(publish_parts, "PART_ENTRIES", 3)
    monkeypatch.setattr(publish_parts, "WHOLE_UP_TO", 3)
    ref = any_store.publish(src, "tree")
    assert ref.digest == _whole(any_store, src, "tree") and staging_names(any_store) == []
    any_store.download(ref, tmp_path / "back")
    assert_metadata_equal(capture_tree(src), capture_tree(tmp_path / "back"), stage="download")

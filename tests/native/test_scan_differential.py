"""The native core's scan and manifest against the reference's, on generated trees: every field of every
captured entry alike (names that are no UTF-8, modes with setuid, times before 1970 and after 2038, holes,
xattrs, owners, inode flags, symlinks, hard links, FIFOs and devices), and byte-identical manifests from a
whole publish by each engine."""

from __future__ import annotations

import importlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from artifactkit import ArtifactkitError, Store
from artifactkit.engine.plan import Plan
from artifactkit.engine.reference.lists import CapturedList
from artifactkit.engine.reference.scan import scan_tree
from artifactkit.engine.select import engine_for
from artifactkit.engine.values import ScannedTree
from artifactkit.metadata.flags import InodeFlag
from artifactkit.metadata.model import FileMeta
from artifactkit.store.publish import assemble
from tests.native.scan_trees import (
    DIRS,
    PLAIN_DIRS,
    Node,
    both_scans,
    build,
    dir_specs,
    fields,
    manifest_of,
    native_capture,
    nodes,
)
from tests.support.mounts import Mounts


@pytest.fixture
def noatime(mounts: Mounts, native: ModuleType) -> Iterator[Path]:
    """A scratch directory on a tmpfs mounted ``noatime``: the first scan's ``readlink`` would otherwise move
    a link's atime before the second scan captures it."""
    base = mounts.shared("tmpfs-noatime-native", lambda m: m.tmpfs("noatime", size="512m"))
    yield Path(tempfile.mkdtemp(dir=base))


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """``monkeypatch``, to switch engines by ``ARTIFACTKIT_ENGINE``; the native executor's module, imported
    under it, is forgotten afterwards: its opt-in check runs once, at import, and the module left imported
    would make the native engine every later test's default in this process."""
    module = "artifactkit.engine.native"
    imported = module in sys.modules
    yield monkeypatch
    if not imported:
        sys.modules.pop(module, None)


def fresh(base: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))


#: A symlink with a second name, its targets not read: both walks made its entry before the hard links were marked
#: (hypothesis found it in CI once symlinks were linkable).
_LINKED_SYMLINK: Final = [Node(0, b"9", "file"), Node(0, b"99", "symlink", 0o777, target=b"x"),
                          Node(0, b"\xff", "hardlink", link_to=1)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=nodes, dirs=dir_specs, read_links=st.booleans())
@example(tree=_LINKED_SYMLINK, dirs=[(0o755, (0, 0), {}, None, 0)] * len(DIRS), read_links=False)
def test_the_native_scan_captures_what_the_reference_captures(noatime: Path, tree: list[Node],
                                                              dirs: list[tuple], read_links: bool) -> None:
    src = fresh(noatime, "src")
    build(src, tree, dirs)
    reference, native = both_scans(src, read_links=read_links)
    assert fields(native) == fields(reference)
    # The capture the native executor walks with on two threads: directories ahead, names split where it is free.
    captured = scan_tree(src, read_links=read_links, walker=native_capture(threads=2, split_min=2))
    assert fields(captured) == fields(reference)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=nodes, dirs=dir_specs)
def test_a_publish_by_each_engine_writes_the_same_manifest_bytes(noatime: Path, engines: pytest.MonkeyPatch,
                                                                 tree: list[Node], dirs: list[tuple]) -> None:
    src = fresh(noatime, "src")
    build(src, tree, dirs)
    found = {}
    for engine in ("python", "native"):
        engines.setenv("ARTIFACTKIT_ENGINE", engine)
        store = Store(fresh(noatime, f"store-{engine}"))
        try:
            found[engine] = manifest_of(store, store.publish(src, "tree"))
        except ArtifactkitError as err:  # a time past the manifest's range: refused alike
            found[engine] = (type(err), str(err), err.context)
    assert found["native"] == found["python"]


def test_a_root_given_as_a_path_with_a_trailing_slash_is_scanned_alike(noatime: Path) -> None:
    src = fresh(noatime, "src")
    build(src, [Node(0, b"f", "file", data=b"x"), Node(1, b"l", "symlink", target=b"f")], PLAIN_DIRS)
    reference, native = both_scans(f"{src}/")
    assert fields(native) == fields(reference)
    assert any(e.path == "sub dir/l" and e.target == "f" for e in native.entries)


def test_a_hard_links_first_name_is_first_in_pythons_order_of_names_not_in_their_bytes(noatime: Path) -> None:
    src = fresh(noatime, "src")
    # U+FF71's UTF-8 (ef bd b1) sorts before the byte ff, whose str (U+DCFF) sorts before U+FF71.
    build(src, [Node(0, "\uff71".encode(), "file", data=b"x"), Node(0, b"\xff", "hardlink")], PLAIN_DIRS)
    reference, native = both_scans(src)
    assert fields(native) == fields(reference)
    assert {e.path: e.hardlink for e in native.entries if e.kind == "file"} == {"\uff71": "\udcff", "\udcff": None}


def test_a_publish_on_the_native_engine_captures_stages_and_encodes_in_the_core_and_with_a_stat_cache_reads_only(
        noatime: Path, native: ModuleType, engines: pytest.MonkeyPatch) -> None:
    monkeypatch = engines
    core, calls = importlib.import_module("artifactkit._native"), []
    for name in ("capture_tree", "stage_files", "manifest_lines"):
        real = getattr(core, name)
        monkeypatch.setattr(core, name, lambda *args, real=real, name=name: (calls.append(name), real(*args))[1])
    src = fresh(noatime, "src")
    build(src, [Node(0, b"f", "file", data=b"x")], PLAIN_DIRS)
    monkeypatch.setenv("ARTIFACTKIT_ENGINE", "native")
    Store(fresh(noatime, "store")).publish(src, "tree")
    assert calls == ["capture_tree", "stage_files", "manifest_lines"]
    calls.clear()
    # The cache's questions are Python's: the reference's walk and assembly, the core's reads of its items.
    Store(fresh(noatime, "store")).publish(src, "tree", stat_cache=True)
    assert calls == ["stage_files"]
    calls.clear()
    monkeypatch.setenv("ARTIFACTKIT_ENGINE", "python")
    Store(fresh(noatime, "store")).publish(src, "tree")
    assert calls == []


def test_an_entry_only_the_reference_encodes_is_assembled_by_the_reference_on_the_native_engine(
        native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = FileMeta("odd", "fifo", 0o644, 1, 2, ctime_ns=3, uid=0, gid=0, xattrs=(), flags=InodeFlag.FS_SYNC_FL)
    root = FileMeta(".", "dir", 0o755, 1, 2, ctime_ns=3, uid=0, gid=0, xattrs=(), flags=0)
    tree = ScannedTree("src", CapturedList((root, odd)), {".": (1, 1), "odd": (1, 2)}, listed_noatime=True)
    plan = Plan(lambda sha, size: False, [root, odd], [], {}, [])
    found = {}
    for engine in ("python", "native"):
        monkeypatch.setenv("ARTIFACTKIT_ENGINE", engine)
        listing, recorded = assemble(tree, "tree", plan, [], encode=engine_for(None, "publish").encode)
        found[engine] = (listing.joined(), recorded)
    assert found["native"] == found["python"]
    assert b'"flags": 8' in found["native"][0]  # json writes an IntFlag as its int


def test_no_entry_of_a_published_tree_becomes_a_filemeta_on_the_native_engine(
        noatime: Path, native: ModuleType, engines: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    real = native.CapturedEntries._entries

    def counted(self: Any) -> tuple[FileMeta, ...]:
        made.append(len(self))
        return real(self)
    engines.setattr(native.CapturedEntries, "_entries", counted)
    src = fresh(noatime, "src")
    build(src, [Node(0, f"f{i}".encode(), "file", data=b"%d" % (i % 3)) for i in range(40)], PLAIN_DIRS)
    manifests = []
    for engine in ("native", "python"):
        engines.setenv("ARTIFACTKIT_ENGINE", engine)
        store = Store(fresh(noatime, f"store-{engine}"))
        manifests.append(manifest_of(store, store.publish(src, "tree")))
    assert made == []  # not one FileMeta made of the capture
    assert manifests[0] == manifests[1]

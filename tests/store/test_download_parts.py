"""A large version downloaded in parts (issue 52, bounded memory): what lands is what a whole download makes, field
for field, on both engines; no part's listing holds more than its share of entries; and what a part asks of the
tree beyond itself (a hard link's first name) is checked as a whole manifest's is.

The part size is made small here (``tree_parts.PART_ENTRIES``), so a tree of a hundred entries is made in dozens of
parts, cut at every place a part can end: inside a split directory, between a directory and its subtree, before and
after the first name of a hard link whose later names sort into another directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit import IntegrityError, Store, assert_metadata_equal, capture_tree
from artifactkit.engine.reference import create
from artifactkit.manifest import tree_parts
from artifactkit.metadata.model import FileMeta
from artifactkit.store import download, download_parts
from artifactkit.store.progress import Progress
from tests.support.engines import ENGINE_NAMES
from tests.support.tree_objects import (
    canonical_entries,
    directory_objects,
    object_doc,
    put_object,
    root_doc,
    with_object,
)


def _tree(src: Path) -> Path:
    """Names that sort around ``/`` (``a``, ``a-x``, ``a.y``, ``a0``), a directory split into parts, hard links
    whose names lie in other directories (one in a read-only directory), a symlink, a FIFO, an empty directory."""
    for directory in ("a/b/c", "a-x", "a.y/z", "a0", "ro", "empty", "split"):
        (src / directory).mkdir(parents=True, exist_ok=True)
    for directory in ("", "a", "a/b", "a/b/c", "a-x", "a.y", "a.y/z", "a0", "ro"):
        for i in range(3):
            (src / directory / f"f{i}").write_bytes(f"{directory}{i}\n".encode())
    for i in range(300):  # more than one object holds (tree_format.WHOLE_ENTRIES): an index and its parts
        (src / "split" / f"{i:04d}").write_bytes(b"s" * (i % 7))
    os.link(src / "a/f1", src / "a.y/z/later")
    os.link(src / "a/f1", src / "ro/later")
    os.link(src / "a-x/f2", src / "split/0150-later")
    # A first name in a directory still open when its later name's part is made, with new names after it there.
    (src / "w/sub").mkdir(parents=True)
    (src / "w/f0").write_bytes(b"w0\n")
    os.link(src / "w/f0", src / "w/sub/later")
    (src / "w/zz").write_bytes(b"zz\n")
    (src / "a/link").symlink_to("f1")
    os.mkfifo(src / "a0/fifo")
    os.utime(src / "a/b", ns=(1_000_000_001, 2_000_000_002))
    (src / "ro").chmod(0o555)
    os.utime(src / "ro", ns=(3_000_000_003, 4_000_000_004))
    return src


@pytest.fixture
def published(fast_tmp: Path) -> tuple[Store, Path]:
    store = Store(str(fast_tmp / "store"))
    src = _tree(fast_tmp / "src")
    with pytest.warns(Warning):  # the symlink's readlink moves its atime: said, not a failure
        store.publish(str(src), "t")
    return store, fast_tmp


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("size", [1, 3, 17])
def test_a_download_in_parts_restores_what_a_whole_one_does(
        published: tuple[Store, Path], use_engine: Callable[[str], None], monkeypatch: pytest.MonkeyPatch,
        engine: str, size: int) -> None:
    use_engine(engine)
    store, tmp = published
    store.download("t", str(tmp / "whole"))  # ~330 entries: one part at the default size
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", size)
    store.download("t", str(tmp / "parts"))
    assert_metadata_equal(capture_tree(str(tmp / "whole")), capture_tree(str(tmp / "parts")), stage="download")
    links = {os.lstat(tmp / "parts" / path).st_ino for path in ("a/f1", "a.y/z/later", "ro/later")}
    assert len(links) == 1 and os.lstat(tmp / "parts" / "a/f1").st_nlink == 3


def test_no_part_is_parsed_with_more_than_its_entries_and_what_it_stands_on(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard of the bound: on the code before parts, one parse held every entry of the tree.
    store, tmp = published
    parsed: list[int] = []
    parse = download_parts.verified_entries

    def counted(*args: object, **kwargs: object) -> object:
        entries = parse(*args, **kwargs)  # type: ignore[arg-type]
        parsed.append(len(entries))
        return entries
    monkeypatch.setattr(download_parts, "verified_entries", counted)
    sealed: list[str] = []
    seal = create.apply_fd

    def sealing(fd: int, entry: FileMeta, where: str) -> None:
        if entry.kind == "dir":
            sealed.append(entry.path)
        seal(fd, entry, where)
    monkeypatch.setattr(create, "apply_fd", sealing)
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", 10)
    store.download("t", str(tmp / "parts"))
    total = len(capture_tree(str(tmp / "parts")))
    assert len(parsed) >= total // 10
    # Each directory sealed once, by the part after which nothing goes into it: sealed early, a read-only
    # directory would refuse a non-root downloader's next part (and every later part would seal it again).
    directories = sorted(entry.path for entry in capture_tree(str(tmp / "parts")) if entry.kind == "dir")
    assert sorted(sealed) == directories
    # A part's own 10, the directories it lies in (at most the depth, 4, and a few waiting subdirectories) and a
    # looked-up first name with its way.
    assert max(parsed) <= 10 + 8, parsed


def test_a_small_version_is_downloaded_whole(published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, tmp = published
    monkeypatch.setattr(download_parts, "download_in_parts", None)  # called: a TypeError
    store.download("t", str(tmp / "whole"))


def _forge_later_name(store: Store, claimed: str) -> None:
    """Version 2 of ``t``: its ``a0`` directory gains a later name claiming ``claimed`` as its first name (the
    root's counts say so too: only the claim is wrong)."""
    ref = store.resolve("t")
    doc = object_doc(store, directory_objects(store, ref)["a0"])
    first = next(entry for entry in doc["entries"] if entry["path"] == "a0/f0")
    entries = [*doc["entries"], {**first, "path": "a0/zz", "hardlink": claimed}]
    digest = put_object(store, canonical_entries("a0", entries, doc["trees"]))
    root = root_doc(store, ref)
    with_object(store, ref, "a0", digest, version=2, entries=root["entries"] + 1, files=root["files"] + 1)


@pytest.mark.parametrize("claimed", ["split", "a/nothing", "a/b/c/../f0"])
def test_a_later_name_claiming_a_directory_or_nothing_is_refused_in_parts(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch, claimed: str) -> None:
    store, tmp = published
    _forge_later_name(store, claimed)
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", 5)
    with pytest.raises(IntegrityError):
        store.download("t@2", str(tmp / "out"))
    assert not (tmp / "out").exists()
    assert [name for name in os.listdir(tmp) if name.startswith(".out.")] == []


def test_progress_in_parts_reaches_every_entry_and_byte(published: tuple[Store, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store, tmp = published
    seen: list[Progress] = []
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", 10)
    store.download("t", str(tmp / "parts"), progress=seen.append)
    last = [item for item in seen if item.phase == "create"][-1]
    assert (last.entries, last.bytes) == (last.entries_total, last.bytes_total)
    assert last.entries_total == len(capture_tree(str(tmp / "parts"))) - 1  # every entry but the root


def test_a_mount_that_turns_caching_after_parts_were_chosen_names_the_times_unverified(
        published: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # Parts are chosen only where no client cache is; one that appears before the rename must not be looked through.
    store, tmp = published
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", 10)
    looks = iter([False])
    monkeypatch.setattr(download, "may_cache", lambda parent: next(looks, True))
    assert store.download("t", str(tmp / "parts")).unverified == ("mtime_ns", "atime_ns")

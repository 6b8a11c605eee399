"""A tree deeper than PATH_MAX: refused with a named error, nothing published (was a bare OSError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from artifactkit import ArtifactkitError, Store
from artifactkit.errors import TreeTooDeepError
from tests.support.stores import nothing_stored

NAME = "d" * 200


def _deep_tree(root: Path, levels: int, name: str = NAME) -> None:
    """``levels`` nested directories of ``name``, made through dir fds (no path is ever that long)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def _remove_deep(root: Path, levels: int, name: str = NAME) -> None:
    """Remove a chain too deep for a path (and for shutil.rmtree) with one fd: pull each level up into
    ``root`` by a rename, then remove the emptied directory. Holding an fd per level was 1,501 fds: past a
    user's default limit of 1,024 (EMFILE, and the fds it held then leaked into every later test)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels - 1):
            os.rename(f"{name}/{name}", f"{name}.next", src_dir_fd=fd, dst_dir_fd=fd)
            os.rmdir(name, dir_fd=fd)
            os.rename(f"{name}.next", name, src_dir_fd=fd, dst_dir_fd=fd)
        os.unlink(f"{name}/leaf", dir_fd=fd)
        os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(root)


def test_a_tree_deeper_than_path_max_is_refused_with_a_named_error_and_no_store_appears(
        fast_tmp: Path, any_store: Store) -> None:
    levels = 25  # 25 x 201 bytes: past the 4096-byte PATH_MAX
    _deep_tree(fast_tmp / "src", levels)
    try:
        with pytest.raises(TreeTooDeepError, match="PATH_MAX") as caught:
            Store(any_store.root).publish(fast_tmp / "src", "deep")
        assert isinstance(caught.value, ArtifactkitError) and isinstance(caught.value, OSError)
        assert nothing_stored(any_store)
    finally:
        _remove_deep(fast_tmp / "src", levels)


def test_a_deep_tree_within_path_max_still_publishes(fast_tmp: Path, any_store: Store) -> None:
    _deep_tree(fast_tmp / "src", 15)  # 15 x 201 bytes: inside PATH_MAX
    try:
        ref = Store(any_store.root).publish(fast_tmp / "src", "deep")
        assert len(Store(any_store.root).manifest(ref).entries) == 17
    finally:
        _remove_deep(fast_tmp / "src", 15)


def test_a_tree_deeper_than_the_recursion_limit_but_within_path_max_publishes_and_downloads(
        fast_tmp: Path, any_store: Store) -> None:
    levels = 1500  # 1,500 x 2 bytes: inside PATH_MAX, past the interpreter's 1,000 frames (was a RecursionError)
    _deep_tree(fast_tmp / "src", levels, "a")
    try:
        store = Store(any_store.root)
        ref = store.publish(fast_tmp / "src", "deep")
        assert len(store.manifest(ref).entries) == levels + 2
        store.download(ref, fast_tmp / "out")
        assert os.path.exists(os.path.join(fast_tmp, "out", *["a"] * levels, "leaf"))
        _remove_deep(fast_tmp / "out", levels, "a")  # shutil.rmtree recurses: it could not remove these
    finally:
        _remove_deep(fast_tmp / "src", levels, "a")

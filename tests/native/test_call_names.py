"""Every ``OSError`` of either engine names the call that failed, before the path: "[Errno 2] lstat: No such
file or directory: '...'", the same words from both (``same_error``), on the publish side and the download's."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from artifactkit.engine.reference.scan import scan_tree
from tests.native.test_guards import create_both, tree_with_blobs
from tests.native.test_scan_guards import WALKS
from tests.native.trees import same_error

Work = Callable[[str], Path]


def names_call(error: BaseException, call: str) -> None:
    assert isinstance(error, OSError), error
    assert re.match(rf"\[Errno \d+\] {call}: {re.escape(os.strerror(error.errno or 0))}: '", str(error)), str(error)


def test_a_missing_root_names_lstat_in_both_engines(native: ModuleType, fast_tmp: Path) -> None:
    errors = []
    for walker in WALKS():
        with pytest.raises(FileNotFoundError) as caught:
            scan_tree(fast_tmp / "missing", walker=walker)
        errors.append(caught.value)
    assert len(errors) > 1  # the reference's walk, and the core's
    for error in errors[1:]:
        same_error(errors[0], error)
    names_call(errors[0], "lstat")
    assert str(errors[0]) == f"[Errno 2] lstat: No such file or directory: '{fast_tmp / 'missing'}'"


def test_a_symlink_planted_for_a_directory_names_open(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)
    outside = work("outside")

    def plant(root_fd: int) -> None:
        os.rmdir("sub", dir_fd=root_fd)
        os.symlink(str(outside), "sub", dir_fd=root_fd)
    error, _ = create_both(native, work, entries, blobs, plant)  # same_error: the same words from both
    names_call(error, "open")


def test_a_file_planted_for_a_destination_directory_names_open(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)

    def plant(root_fd: int) -> None:
        os.rmdir("sub", dir_fd=root_fd)
        os.close(os.open("sub", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=root_fd))
    error, _ = create_both(native, work, entries, blobs, plant)
    assert isinstance(error, NotADirectoryError)
    names_call(error, "open")

"""A store on a filesystem with neither ``RENAME_NOREPLACE`` nor ``link(2)`` (s3fs, rclone mount: issue 49) is named
before a publish moves anything; any other failure of ``link`` stays what it is. The real filesystems are in
``tests/test_fs_matrix_fuse.py``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from artifactkit.cli.common import EXIT_SETUP, exit_code_of
from artifactkit.conformance.corpus import materialize
from artifactkit.store import layout
from artifactkit.store.store import Store


def _without(monkeypatch: pytest.MonkeyPatch, link_errno: int) -> None:
    def no_rename_noreplace(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    def no_link(*args: object, **kwargs: object) -> None:
        raise OSError(link_errno, os.strerror(link_errno))

    monkeypatch.setattr(layout, "rename_noreplace", no_rename_noreplace)
    monkeypatch.setattr(layout.os, "link", no_link)


@pytest.mark.parametrize("link_errno", [errno.EOPNOTSUPP, errno.EIO, errno.EPERM])
def test_a_publish_where_no_call_commits_without_replacing_names_the_calls_and_moves_nothing(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, link_errno: int) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    _without(monkeypatch, link_errno)
    with pytest.raises(OSError, match=r"cannot commit atomically: this filesystem \(\w+\) supports neither "
                                      r"renameat2\(RENAME_NOREPLACE\) \(EINVAL\) nor link\(2\) \(E\w+\)") as refused:
        store.publish(fast_tmp / "src", "demo")
    assert refused.value.errno == link_errno and exit_code_of(refused.value) == EXIT_SETUP
    monkeypatch.undo()
    assert store.list() == []
    assert [os.listdir(fast_tmp / "store" / sub) for sub in ("blobs", "staging", "manifests")] == [[], [], []]


def test_a_full_disk_met_by_link_stays_a_full_disk(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    _without(monkeypatch, errno.ENOSPC)
    with pytest.raises(OSError) as refused:
        store.publish(fast_tmp / "src", "demo")
    assert refused.value.errno == errno.ENOSPC and "commit atomically" not in str(refused.value)

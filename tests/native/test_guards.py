"""Every guard of the native core, broken once: both engines refuse the case with the same class, message,
fields and ``errno``, and the core writes nothing the reference would not."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

from artifactkit.engine.blobs import BlobSource
from artifactkit.errors import (
    IntegrityError,
    MetadataMismatchError,
    NotRestorableError,
    SourceChangedError,
    TimestampNotRepresentable,
)
from artifactkit.metadata.model import FileMeta
from tests.native.trees import (
    CreateFn,
    File,
    build,
    names_call,
    native_create,
    python_create,
    restore,
    restored,
    same_error,
    stage_items,
    stage_native,
    stage_python,
    write_blobs,
)
from tests.support.mounts import Mounts

Work = Callable[[str], Path]


def both_refuse(reference: Callable[[], Any], candidate: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as expected:  # whatever the reference raises is the spec
        reference()
    with pytest.raises(Exception) as found:
        candidate()
    same_error(expected.value, found.value)
    return found.value


def stage_both(native: ModuleType, work: Work, src: Path, change: Callable[[], None]) -> BaseException:
    items = stage_items(src)
    change()
    blobs = work("blobs")
    return both_refuse(lambda: stage_python(src, items, work("txn"), blobs),
                       lambda: stage_native(native, src, items, work("txn"), blobs))


@pytest.mark.parametrize("change", ["append", "mtime", "symlink", "fifo", "removed"])
def test_a_source_changed_between_scan_and_read_is_refused_alike(native: ModuleType, work: Work,
                                                                 change: str) -> None:
    src = work("src")
    build(src, [File("a", b"before"), File("b", b"other")])
    target = src / "b"

    def act() -> None:
        if change == "append":
            target.write_bytes(b"other, and more")
        elif change == "mtime":
            os.utime(target, ns=(1, 2))
        elif change == "symlink":
            target.unlink()
            target.symlink_to("a")
        elif change == "fifo":
            target.unlink()
            os.mkfifo(target)
        else:
            target.unlink()
    error = stage_both(native, work, src, act)
    assert isinstance(error, FileNotFoundError if change == "removed" else SourceChangedError)


def create_both(native: ModuleType, work: Work, entries: list[FileMeta], blobs: Path,
                before: Callable[[int], None] = lambda fd: None) -> tuple[BaseException, Path]:
    """Both engines' refusal of one download, and where the core's tree was being made."""
    def planted(create: CreateFn) -> CreateFn:
        def run(root_fd: int, items: list[tuple[str, list[FileMeta]]], source: BlobSource) -> None:
            before(root_fd)
            create(root_fd, items, source)
        return run
    ours = work("dest") / "tree"
    error = both_refuse(lambda: restore(entries, work("dest") / "tree", blobs, planted(python_create)),
                        lambda: restore(entries, ours, blobs, planted(native_create(native))))
    return error, ours


def tree_with_blobs(work: Work, data: bytes = b"the content") -> tuple[list[FileMeta], Path, Path]:
    src, blobs = work("src"), work("blobs")
    build(src, [File("sub/f", data)], dirs=["sub"])
    entries = write_blobs(src, blobs)
    return entries, blobs, blobs / hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("blob", ["corrupt", "wrong size", "symlink", "fifo", "missing"])
def test_a_bad_blob_is_refused_alike_and_no_byte_of_it_is_written(native: ModuleType, work: Work,
                                                                  blob: str) -> None:
    entries, blobs, path = tree_with_blobs(work)
    path.unlink()
    if blob == "corrupt":
        path.write_bytes(b"THE CONTENT")  # right size, wrong bytes
    elif blob == "wrong size":
        path.write_bytes(b"the content, and more")
    elif blob == "symlink":
        (blobs / "elsewhere").write_bytes(b"the content")
        path.symlink_to(blobs / "elsewhere")
    elif blob == "fifo":
        os.mkfifo(path)
    error, ours = create_both(native, work, entries, blobs)
    assert isinstance(error, IntegrityError)
    assert (ours / "sub/f").read_bytes() == b""  # created empty, never given unverified bytes


def test_a_symlink_planted_for_a_directory_is_refused_alike(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)
    outside = work("outside")

    def plant(root_fd: int) -> None:
        os.rmdir("sub", dir_fd=root_fd)
        os.symlink(str(outside), "sub", dir_fd=root_fd)
    error, _ = create_both(native, work, entries, blobs, plant)
    assert isinstance(error, OSError)
    assert os.listdir(outside) == []
    names_call(error, "open")  # the same words from both (same_error)


def test_a_file_planted_for_a_destination_directory_names_the_call_alike(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)

    def plant(root_fd: int) -> None:
        os.rmdir("sub", dir_fd=root_fd)
        os.close(os.open("sub", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=root_fd))
    error, _ = create_both(native, work, entries, blobs, plant)
    assert isinstance(error, NotADirectoryError)
    names_call(error, "open")


def test_a_name_taken_before_the_create_is_refused_alike(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)
    error, _ = create_both(native, work, entries, blobs,
                           lambda root_fd: os.close(os.open("sub/f", os.O_CREAT | os.O_WRONLY, dir_fd=root_fd)))
    assert isinstance(error, FileExistsError)


def test_a_time_the_filesystem_cannot_hold_fails_the_read_back_alike(native: ModuleType, work: Work,
                                                                     ext4_whole_seconds: Path) -> None:
    entries, _, _ = tree_with_blobs(work)
    blobs = Path(os.path.join(ext4_whole_seconds, f"blobs-{os.getpid()}"))
    blobs.mkdir(exist_ok=True)
    for e in entries:
        if e.sha256:
            (blobs / e.sha256).write_bytes(b"the content")
    fine = [e if e.kind != "file" else FileMeta(e.path, e.kind, e.mode, 1_500_000_000_123_456_789, e.atime_ns,
                                                e.size, e.sha256, None, None, e.uid, e.gid, e.xattrs, None, None,
                                                e.extents, e.flags) for e in entries]
    dests = [Path(ext4_whole_seconds) / f"dest-{os.getpid()}-{i}" for i in range(2)]
    error = both_refuse(lambda: restore(fine, dests[0], blobs, python_create),
                        lambda: restore(fine, dests[1], blobs, native_create(native)))
    assert isinstance(error, TimestampNotRepresentable | MetadataMismatchError)


def test_xattrs_a_filesystem_cannot_hold_are_refused_alike(native: ModuleType, work: Work, mounts: Mounts) -> None:
    src = work("src")
    build(src, [File("f", b"x", xattrs={"user.a": b"1"})])
    ramfs = mounts.ramfs()
    blobs = ramfs / f"blobs-{os.getpid()}"
    blobs.mkdir()
    entries = write_blobs(src, blobs)
    error = both_refuse(lambda: restore(entries, ramfs / "one", blobs, python_create),
                        lambda: restore(entries, ramfs / "two", blobs, native_create(native)))
    assert isinstance(error, NotRestorableError)


def test_inode_flags_a_filesystem_cannot_set_are_refused_alike(native: ModuleType, work: Work) -> None:
    entries, blobs, _ = tree_with_blobs(work)
    sync = [attrs.evolve(e, flags=(e.flags or 0) | 0x8) if e.kind == "file" else e for e in entries]  # chattr +S
    reference, candidate = work("dest") / "tree", work("dest") / "tree"
    try:
        restore(sync, reference, blobs, python_create)
    except NotRestorableError:
        error = both_refuse(lambda: restore(sync, work("dest") / "tree", blobs, python_create),
                            lambda: restore(sync, candidate, blobs, native_create(native)))
        assert "inode flag(s) S" in str(error)
        return
    restore(sync, candidate, blobs, native_create(native))  # a filesystem that holds +S: restored alike
    assert restored(candidate, sync) == restored(reference, sync)

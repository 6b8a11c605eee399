"""Every refusal of the scan, broken once on purpose: the reference's walk and the native core's refuse the case
with the same class, message, fields, ``errno``, filename and cause. The races are made deterministic from
``on_progress``, which both call after each directory's capture, before the next directory is opened (and,
after the last, before any link is read). On two threads the capture may have captured a later directory ahead
already (``native/src/scan/second_thread.rs``); it takes that part in only if the directory is unchanged, and captures
it again at its turn otherwise, so a hook that swaps a directory or adds, removes or renames a name in it is
seen there as the reference sees it (``test_scan_ahead.py`` makes such a change after the capture ahead)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from artifactkit.engine.reference.scan import Walker, scan_tree
from artifactkit.errors import SourceChangedError, TreeTooDeepError, UnsupportedFileType
from tests.native.scan_trees import native_capture
from tests.native.trees import names_call, same_error

Make = Callable[[Path], None]
Hook = Callable[[Path], Callable[[int], None]]


def refused_alike(base: Path, make: Make, hook: Hook | None = None, **options: object) -> BaseException:
    """Build the tree at ``base/src`` with ``make``, scan it with each walk (``hook(src)`` as ``on_progress``),
    and require one refusal of both; the tree is built afresh at the same path for each."""
    src = base / "src"
    errors = []
    for walker in WALKS():
        if src.exists():
            shutil.rmtree(src)
        src.mkdir()
        make(src)
        with pytest.raises(BaseException) as caught:  # whatever the reference raises is the spec
            scan_tree(src, on_progress=hook(src) if hook else None, walker=walker, **options)  # type: ignore[arg-type]
        errors.append(caught.value)
    for error in errors[1:]:
        same_error(errors[0], error)
    return errors[1]


def WALKS() -> tuple[Walker | None, ...]:  # noqa: N802 - a constant, made on use (the core imports only then)
    """The reference's walk, the core's walk and the core's capture on two threads (the next directory ahead;
    names split from two on, where the second thread is free)."""
    return None, native_capture(), native_capture(threads=2, split_min=2)


def once_at(count: int, act: Callable[[Path], None]) -> Hook:
    """A hook that changes the tree once, as soon as ``count`` entries are captured."""
    def hook(src: Path) -> Callable[[int], None]:
        done: list[bool] = []

        def on_progress(captured: int) -> None:
            if not done and captured >= count:
                done.append(True)
                act(src)
        return on_progress
    return hook


def two_dirs(src: Path) -> None:
    for d in ("a", "a/inner", "b"):
        (src / d).mkdir()
    (src / "a/inner/f").write_bytes(b"f")
    (src / "b/g").write_bytes(b"g")
    os.symlink("g", src / "b/link")


def test_a_missing_root_a_file_and_a_link_to_a_directory_are_refused_alike(native: ModuleType,
                                                                          fast_tmp: Path) -> None:
    (fast_tmp / "file").write_bytes(b"")
    (fast_tmp / "dir").mkdir()
    os.symlink("dir", fast_tmp / "link")
    for root, kind in (("missing", FileNotFoundError), ("file", NotADirectoryError), ("link", NotADirectoryError)):
        errors = []
        for walker in WALKS():
            with pytest.raises(kind) as caught:
                scan_tree(fast_tmp / root, walker=walker)
            errors.append(caught.value)
        for error in errors[1:]:
            same_error(errors[0], error)
        if root == "missing":  # the call named, as well as the path (issue 49)
            names_call(errors[0], "lstat")
            assert str(errors[0]) == f"[Errno 2] lstat: No such file or directory: '{fast_tmp / 'missing'}'"


@pytest.mark.parametrize("root", ["nul\x00here", "lone\ud800surrogate"], ids=["nul", "surrogate"])
def test_a_root_no_syscall_takes_is_refused_as_the_reference_refuses_it(native: ModuleType, root: str) -> None:
    errors = []
    for walker in WALKS():
        with pytest.raises((ValueError, UnicodeEncodeError)) as caught:
            scan_tree(root, walker=walker)
        errors.append(caught.value)
    for error in errors[1:]:
        same_error(errors[0], error)


@pytest.mark.parametrize("count", [1, 25])
def test_sockets_are_refused_alike_and_all_named(native: ModuleType, fast_tmp: Path, count: int) -> None:
    def make(src: Path) -> None:
        two_dirs(src)
        for i in range(count):  # a socket inode, as bind() leaves one; one of them deeper down
            os.mknod(src / ("a/inner" if i == 0 else "b") / f"s{i:02}", stat.S_IFSOCK | 0o600)
    error = refused_alike(fast_tmp, make)
    assert isinstance(error, UnsupportedFileType)
    assert len(error.context["paths"]) == count


def test_a_bound_socket_is_refused_alike(native: ModuleType, fast_tmp: Path) -> None:
    def make(src: Path) -> None:
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(src)  # a relative name: AF_UNIX paths hold at most 108 bytes
        try:
            sock.bind("live")
        finally:
            os.chdir(here)
            sock.close()
    assert isinstance(refused_alike(fast_tmp, make), UnsupportedFileType)


def test_a_tree_deeper_than_path_max_is_refused_alike_at_the_same_place(native: ModuleType, fast_tmp: Path) -> None:
    def make(src: Path) -> None:
        fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(25):  # 25 x 201 bytes: past PATH_MAX
                os.mkdir("d" * 200, dir_fd=fd)
                fd, old = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
                os.close(old)
            os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        finally:
            os.close(fd)
    error = refused_alike(fast_tmp, make)
    assert isinstance(error, TreeTooDeepError)


def test_a_directory_swapped_for_a_symlink_during_the_walk_is_refused_alike(native: ModuleType,
                                                                          fast_tmp: Path) -> None:
    def swap(src: Path) -> None:  # after the root's capture, before "b" is opened
        os.rename(src / "b", src / "b-gone")
        os.symlink("a", src / "b")
    error = refused_alike(fast_tmp, two_dirs, once_at(3, swap))
    assert isinstance(error, NotADirectoryError)  # O_NOFOLLOW | O_DIRECTORY met the link


@pytest.mark.parametrize("where", ["itself", "a parent"])
def test_a_directory_replaced_during_the_walk_is_refused_alike(native: ModuleType, fast_tmp: Path,
                                                             where: str) -> None:
    def swap(src: Path) -> None:
        if where == "itself":  # another directory renamed into its place before it is listed
            os.rename(src / "b", src / "b-gone")
            (src / "b").mkdir()
        else:  # "a" is captured and listed; "a/inner" is reached through "a", now a link to a look-alike
            (src / "copy/inner").mkdir(parents=True)
            os.rename(src / "a", src / "a-gone")
            os.symlink("copy", src / "a")
    error = refused_alike(fast_tmp, two_dirs, once_at(3 if where == "itself" else 4, swap))
    assert isinstance(error, SourceChangedError)
    assert "was scanned" in str(error)


@pytest.mark.parametrize("change", ["retargeted", "removed", "directory replaced"])
def test_a_link_changed_after_every_lstat_and_before_its_readlink_is_refused_alike(native: ModuleType,
                                                                                fast_tmp: Path,
                                                                                change: str) -> None:
    def act(src: Path) -> None:  # the last directory is captured: next come the links
        if change == "retargeted":
            os.symlink("a-longer-target", src / "b/new")
            os.rename(src / "b/new", src / "b/link")
        elif change == "removed":
            os.unlink(src / "b/link")
        else:
            os.rename(src / "b", src / "b-gone")
            (src / "b").mkdir()
            os.symlink("g", src / "b/link")
    error = refused_alike(fast_tmp, two_dirs, once_at(7, act))
    assert isinstance(error, SourceChangedError)
    assert ("was published" if change == "directory replaced" else "retargeted") in str(error)


def test_an_entry_listed_and_gone_before_its_lstat_is_refused_alike(native: ModuleType) -> None:
    # /proc/self/fd lists the descriptor the listing itself reads through (os.listdir reads a dup of the
    # directory's fd, closed right after): its name is listed, and gone before its lstat.
    errors = []
    for walker in WALKS():
        with pytest.raises(SourceChangedError) as caught:
            scan_tree("/proc/self/fd", walker=walker)
        errors.append(caught.value)
    for error in errors[1:]:
        same_error(errors[0], error)
        assert "vanished" in str(error)
        assert isinstance(error.__cause__, FileNotFoundError)
        assert error.__cause__.filename == errors[0].__cause__.filename  # type: ignore[union-attr]


def test_an_error_raised_by_on_progress_stops_both_walks_with_that_error_at_once(native: ModuleType,
                                                                              fast_tmp: Path) -> None:
    seen: list[list[int]] = []

    def hook(src: Path) -> Callable[[int], None]:
        seen.append([])

        def on_progress(captured: int) -> None:
            seen[-1].append(captured)
            if captured >= 3:
                raise KeyboardInterrupt(f"stopped at {src.name}")
        return on_progress
    error = refused_alike(fast_tmp, two_dirs, hook)
    assert isinstance(error, KeyboardInterrupt)
    assert seen == [[3], [3], [3]]  # nothing scanned after it


def test_on_progress_is_told_the_same_counts_by_both_walks(native: ModuleType, fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    two_dirs(src)
    seen: list[list[int]] = [[], [], []]
    for walker, counts in zip(WALKS(), seen, strict=True):
        scan_tree(src, on_progress=counts.append, walker=walker)
    assert seen[0] == seen[1] == seen[2] == [3, 4, 5, 7]


_CTRL_C = """
import functools, os, signal, sys, tempfile
from pathlib import Path
from artifactkit.engine.native import NativeEngine
from artifactkit.engine.reference.scan import scan_tree
signal.signal(signal.SIGQUIT, signal.SIG_IGN)
# os.killpg is a C function that does not look for signals itself: called with the 2 entries captured after
# the root's listing, it sends SIGINT (2) to this process's own group and returns straight into the walk.
on_progress = functools.partial(os.killpg, os.getpgid(0))
for walker in (None, NativeEngine(1, "publish").walk, functools.partial(NativeEngine(2, "publish").walk, split_min=2)):
    src = Path(tempfile.mkdtemp(dir=sys.argv[1]))
    (src / "d").mkdir()
    os.symlink("target", src / "d/l")
    os.utime(src / "d/l", ns=(1, 2), follow_symlinks=False)
    try:
        scan_tree(src, on_progress=on_progress, walker=walker)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted, link atime", os.lstat(src / "d/l").st_atime_ns)
"""


def test_ctrl_c_during_the_walk_stops_both_walks_before_any_link_is_read(native: ModuleType,
                                                                        tmpfs_strict: Path) -> None:
    # The core must look for a signal after each on_progress (check_signals): a walk that went on would list
    # "d" (sending signal 3, SIGQUIT, ignored there) and read the link, which on a strictatime mount moves its
    # atime. In a process of its own session: the signal goes to its group only.
    base = tempfile.mkdtemp(dir=tmpfs_strict)
    done = subprocess.run([sys.executable, "-c", _CTRL_C, base], capture_output=True, text=True, check=False,
                          start_new_session=True, timeout=60)
    assert done.stdout.splitlines() == ["interrupted, link atime 1"] * 3, done.stdout + done.stderr

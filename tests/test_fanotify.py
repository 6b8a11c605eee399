"""The fanotify kernel interface on a real mount: what the holder's design rests on, checked, not assumed."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit._fanotify import (
    FAN_ALLOW,
    FanMask,
    FanotifyUnavailable,
    allow,
    mark_mount,
    open_group,
    parse,
    path_of,
)
from tests.support.capability import can_fanotify, require_holding_openers

REPO = Path(__file__).resolve().parents[2]
PR_CAPBSET_DROP = 24  # include/uapi/linux/prctl.h
CAP_SYS_ADMIN = 21    # include/uapi/linux/capability.h


@pytest.fixture
def traced(tmpfs_relatime: Path) -> Iterator[Path]:
    """A directory holding one file, on a tmpfs of this session's own: a mount mark there holds
    nobody else's opens (not /dev/shm's, which other test sessions use)."""
    require_holding_openers()
    path = Path(tempfile.mkdtemp(prefix="fan-", dir=tmpfs_relatime))
    (path / "file").write_bytes(b"data")
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)


@pytest.fixture
def group(traced: Path) -> Iterator[int]:
    fd = open_group(permission=True)
    mark_mount(fd, str(traced), FanMask.FAN_OPEN_PERM)
    yield fd
    with contextlib.suppress(OSError):  # the test may have closed it itself
        os.close(fd)


def _held_cat(path: Path, group_fd: int) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``cat path`` and take its permission event; the cat is waiting for our answer."""
    cat = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    while True:
        assert select.select([group_fd], [], [], 30)[0], "no permission event within 30 s"
        events = parse(os.read(group_fd, 4096))
        mine = [ev for ev in events if ev.pid == cat.pid]
        for ev in events:
            if ev.pid != cat.pid:  # anyone else on this mount goes on at once
                allow(group_fd, ev.fd)
                os.close(ev.fd)
        if mine:
            return cat, mine[0].fd


def test_mask_values_are_the_kernel_ones() -> None:
    assert FanMask.FAN_ACCESS == 0x1
    assert FanMask.FAN_OPEN == 0x20
    assert FanMask.FAN_OPEN_PERM == 0x10000
    assert FanMask.FAN_ACCESS_PERM == 0x20000
    assert FanMask.FAN_ONDIR == 0x40000000
    assert FAN_ALLOW == 0x1


def test_a_permission_event_keeps_the_opener_waiting_until_it_is_allowed(traced: Path, group: int) -> None:
    cat, event_fd = _held_cat(traced / "file", group)
    try:
        assert path_of(event_fd) == str(traced / "file")
        with pytest.raises(subprocess.TimeoutExpired):
            cat.wait(timeout=0.3)  # it cannot finish: its open() has not returned
        allow(group, event_fd)
    finally:
        os.close(event_fd)
    assert cat.communicate(timeout=30) == (b"data", None)
    assert cat.returncode == 0


def test_closing_the_group_lets_a_waiting_opener_through(traced: Path, group: int) -> None:
    # The holder's last line of defence: whatever happens to it, its group fd closes.
    cat, event_fd = _held_cat(traced / "file", group)
    os.close(event_fd)
    os.close(group)
    assert cat.communicate(timeout=30) == (b"data", None)
    assert cat.returncode == 0


def test_answering_an_event_that_is_gone_is_not_an_error(group: int) -> None:
    allow(group, 999_999)  # ENOENT from the kernel: the opener was killed meanwhile


def test_procfs_refuses_permission_events_which_is_where_the_tracer_falls_back(group: int) -> None:
    with pytest.raises(FanotifyUnavailable) as info:
        mark_mount(group, "/proc/self", FanMask.FAN_OPEN_PERM)
    assert info.value.errno == errno.EINVAL


def _drop_cap_sys_admin() -> None:
    # Runs in the child before exec: root without CAP_SYS_ADMIN in its bounding set, as a
    # container or a hardened service would be.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_without_cap_sys_admin_fanotify_says_it_is_unavailable_and_why(fast_tmp: Path) -> None:
    code = ("from artifactkit.trace.tracer import FanotifyUnavailable, start_tracer\n"
            "try:\n    start_tracer([__import__('sys').argv[1]])\n"
            "except FanotifyUnavailable as err:\n    print(err.strerror)\n")
    result = subprocess.run([sys.executable, "-c", code, str(fast_tmp)], cwd=REPO, capture_output=True,
                            text=True, check=False,
                            # An ordinary user has no CAP_SYS_ADMIN to drop; root drops it first.
                            preexec_fn=_drop_cap_sys_admin if can_fanotify() else None)
    assert result.returncode == 0, result.stderr
    assert "fanotify unavailable" in result.stdout
    assert "CAP_SYS_ADMIN" in result.stdout


def test_unavailable_is_an_oserror_with_errno() -> None:
    err = FanotifyUnavailable(1, "fanotify unavailable: test")
    assert isinstance(err, OSError)
    assert err.errno == 1

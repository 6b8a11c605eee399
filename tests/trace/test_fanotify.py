"""fanotify attribution on a real mount: a foreign reader's pid and executable, or a clear refusal."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit.trace.fanotify import FanMask, FanotifyUnavailable, start_tracer
from tests.support.capability import can_fanotify, require_fanotify

REPO = Path(__file__).resolve().parents[2]
PR_CAPBSET_DROP = 24  # include/uapi/linux/prctl.h
CAP_SYS_ADMIN = 21    # include/uapi/linux/capability.h


@pytest.fixture
def as_root() -> None:
    require_fanotify()


def test_mask_values_are_the_kernel_ones() -> None:
    assert FanMask.FAN_ACCESS == 0x1
    assert FanMask.FAN_OPEN == 0x20
    assert FanMask.FAN_ONDIR == 0x40000000


@pytest.mark.usefixtures("as_root")
def test_a_foreign_reader_is_named_by_pid_and_executable(fast_tmp: Path) -> None:
    traced, other = fast_tmp / "traced", fast_tmp / "other"
    traced.mkdir()
    other.mkdir()
    (traced / "file").write_bytes(b"data")
    (other / "file").write_bytes(b"data")
    tracer = start_tracer([traced])
    # Each cat reads its file, then blocks on stdin ("-"), so it is still alive (its /proc/PID/exe
    # readable) when the tracer attributes the event; a reaped process can only be "unknown (exited)".
    inside = subprocess.Popen(["cat", str(traced / "file"), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    outside = subprocess.Popen(["cat", str(other / "file"), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        for process in (inside, outside):
            assert process.stdout is not None
            assert process.stdout.read(4) == b"data"  # the file has been read: its event is queued
        report = tracer.stop()
    finally:
        for process in (inside, outside):
            assert process.stdin is not None
            process.stdin.close()
            process.wait()
    by_pid = {item.pid: item for item in report.by_pid}
    assert inside.pid in by_pid
    assert by_pid[inside.pid].executable == "cat"
    assert by_pid[inside.pid].events >= 1
    assert outside.pid not in by_pid  # same mount, outside the traced directory
    assert report.overflows == 0


def _drop_cap_sys_admin() -> None:
    # Runs in the child before exec: root without CAP_SYS_ADMIN in its bounding set, as a
    # container or a hardened service would be.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_without_cap_sys_admin_fanotify_says_it_is_unavailable_and_why(fast_tmp: Path) -> None:
    code = ("from artifactkit.trace.fanotify import FanotifyUnavailable, start_tracer\n"
            "try:\n    start_tracer([__import__('sys').argv[1]])\n"
            "except FanotifyUnavailable as err:\n    print(err.strerror)\n")
    result = subprocess.run([sys.executable, "-c", code, str(fast_tmp)], cwd=REPO, capture_output=True,
                            text=True, check=False,
                            # An ordinary user has no CAP_SYS_ADMIN to drop; root drops it first.
                            preexec_fn=_drop_cap_sys_admin if can_fanotify() else None)
    assert result.returncode == 0, result.stderr
    assert "fanotify unavailable" in result.stdout
    assert "CAP_SYS_ADMIN" in result.stdout


def test_start_tracer_needs_a_directory() -> None:
    with pytest.raises(ValueError, match="at least one directory"):
        start_tracer([])


def test_unavailable_is_an_oserror_with_errno() -> None:
    err = FanotifyUnavailable(1, "fanotify unavailable: test")
    assert isinstance(err, OSError)
    assert err.errno == 1

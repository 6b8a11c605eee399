"""Gate tests on capabilities found by probing, never on platform names or on "euid is 0".

Each root-only test calls exactly one ``require_*`` here, and the skip says what it needs and what
was tried. With ``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI as root) every such skip is a failure
instead, so the filesystem matrix can never silently stop running.

Every probe does the real thing once (mount a tmpfs, call ``fanotify_init``, open a mode-000 file,
look at the loop-control device) and caches the answer: a user namespace makes euid 0 without
most of root's powers, and a root without CAP_SYS_ADMIN (a container) cannot mount either.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile

import pytest

from artifactkit.conformance.corpus import can_chown_to_others, can_read_unreadable

REQUIRE_ENV = "ARTIFACTKIT_REQUIRE_FS_MATRIX"


def matrix_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail when the environment requires the filesystem matrix."""
    if matrix_required():
        pytest.fail(f"{reason} — and {REQUIRE_ENV}=1 forbids skipping it", pytrace=False)
    pytest.skip(reason)


@functools.cache
def in_user_namespace() -> bool:
    """Inside a user namespace other than the initial one (whose map is the identity over all uids)."""
    with open("/proc/self/uid_map", encoding="ascii") as handle:
        return handle.read().split() != ["0", "0", "4294967295"]


@functools.cache
def can_mount() -> bool:
    """Whether ``mount -t tmpfs`` works here: tried on a scratch directory, then undone."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return False
    point = tempfile.mkdtemp(prefix="artifactkit-mount-probe-")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", point],
                              capture_output=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            return False
        subprocess.run(["umount", point], capture_output=True, check=True)
        return True
    finally:
        os.rmdir(point)


@functools.cache
def can_attach_loop_devices() -> bool:
    """A loop device needs read-write /dev/loop-control, outside any user namespace, and the tools."""
    if in_user_namespace() or not os.access("/dev/loop-control", os.R_OK | os.W_OK):
        return False
    # /usr/sbin holds both; it is not on a Debian non-root PATH, which alone must not look like a pass.
    return all(shutil.which(tool) is not None for tool in ("losetup", "mkfs.ext4"))


@functools.cache
def can_fanotify() -> bool:
    """``fanotify_init(FAN_CLASS_NOTIF)`` as the tracer calls it (CAP_SYS_ADMIN in the initial namespace)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.fanotify_init(0, os.O_RDONLY)
    if fd < 0:
        return False
    os.close(fd)
    return True


@functools.cache
def can_hold_openers() -> bool:
    """``fanotify_init(FAN_CLASS_CONTENT)``: permission events (CAP_SYS_ADMIN, CONFIG_FANOTIFY_ACCESS_PERMISSIONS)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.fanotify_init(0x4, os.O_RDONLY)  # FAN_CLASS_CONTENT, include/uapi/linux/fanotify.h
    if fd < 0:
        return False
    os.close(fd)
    return True


def require_mounts() -> None:
    """Mounting tmpfs/ramfs/overlay: real root, or CAP_SYS_ADMIN over a mount namespace."""
    if not can_mount():
        skip_or_fail("needs to mount test filesystems (tmpfs/ramfs/overlay): tried `mount -t tmpfs` on a "
                     "scratch dir and was refused (run as root, or as a user where `unshare -Urm` works: the "
                     "suite re-runs itself in one unless ARTIFACTKIT_USERNS=0; the header says why not)")


def require_loop_devices() -> None:
    """ext4/xfs/btrfs images: loop devices, which only real root (not a user namespace) can attach."""
    require_mounts()
    if not can_attach_loop_devices():
        skip_or_fail("needs loop devices for ext4/xfs/btrfs images: /dev/loop-control is not read-write "
                     "here or this is a user namespace (real root only), or losetup/mkfs.ext4 are missing")


def require_fanotify() -> None:
    if not can_fanotify():
        skip_or_fail("needs fanotify: fanotify_init(FAN_CLASS_NOTIF) was refused (CAP_SYS_ADMIN, real root)")


def require_holding_openers() -> None:
    """fanotify permission events, which the diagnose tracer uses to name a reader before it goes on."""
    require_fanotify()
    if not can_hold_openers():
        skip_or_fail("needs fanotify permission events: fanotify_init(FAN_CLASS_CONTENT) was refused "
                     "(a kernel without CONFIG_FANOTIFY_ACCESS_PERMISSIONS)")


def require_reading_unreadable_files() -> None:
    """Reading a mode-000 file (the special-modes corpus has one) needs CAP_DAC_OVERRIDE (root)."""
    if not can_read_unreadable():
        skip_or_fail("needs to read a mode-000 file (special-modes corpus): opening one was refused "
                     "(CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH, root)")


def require_tool(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        skip_or_fail(f"needs {tool} from Debian's {package} (.ci/run installs it)")


def can_own_for_others() -> bool:
    """``chown`` to any uid and every xattr namespace: real root (CAP_CHOWN in the initial namespace)."""
    return can_chown_to_others() and not in_user_namespace()


def require_real_root(what: str) -> None:
    if not can_own_for_others():
        skip_or_fail(f"needs real root to {what}: euid is {os.geteuid()}"
                     f"{' inside a user namespace' if in_user_namespace() else ''}")


@functools.cache
def fuse_refusal() -> str | None:
    """Why a bindfs (FUSE) mount fails here, or ``None`` when one was mounted and unmounted just now."""
    if shutil.which("bindfs") is None or shutil.which("fusermount3") is None:
        return "bindfs or fusermount3 is missing (apt-get install bindfs fuse3)"
    scratch = tempfile.mkdtemp(prefix="artifactkit-fuse-probe-")
    lower, point = os.path.join(scratch, "lower"), os.path.join(scratch, "mnt")
    os.mkdir(lower)
    os.mkdir(point)
    try:
        done = subprocess.run(["bindfs", "--no-allow-other", lower, point], capture_output=True, text=True,
                              check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            return f"`bindfs --no-allow-other` exited {done.returncode}: {done.stderr.strip() or 'no message'}"
        subprocess.run(["fusermount3", "-u", point], capture_output=True, check=True)
        return None
    finally:
        os.rmdir(point)
        os.rmdir(lower)
        os.rmdir(scratch)


def require_fuse() -> None:
    """A FUSE mount (bindfs): /dev/fuse, and root or the setuid fusermount3 allowed to use it."""
    refusal = fuse_refusal()
    if refusal is not None:
        skip_or_fail(f"needs a FUSE mount (bindfs adapter): {refusal}")


def require_module(module: str, install: str) -> None:
    """An optional dependency (an extra) the test exercises: skip, naming how to install it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        skip_or_fail(f"needs {module}: {install}")


def require_acls_naming_other_ids() -> None:
    """ACL entries naming another user's id: refused (EINVAL) in a user namespace that maps one id."""
    from artifactkit.conformance.corpus import can_name_other_ids_in_acls

    if not can_name_other_ids_in_acls():
        skip_or_fail("needs ACL entries naming another user's id: this user namespace maps only one id "
                     "(the kernel answers EINVAL); run as root or with ARTIFACTKIT_USERNS=0")

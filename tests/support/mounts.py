"""Create and always tear down real filesystems for tests (root only).

Every mount made here is recorded before it is used, and :meth:`Mounts.close` unmounts them and
detaches every loop device it attached, in reverse order, even after a failing test. Three layers
make "even when interrupted" true:

- ``close()`` runs from the session fixture's teardown (a failure or Ctrl-C still tears down) and
  from ``atexit`` (an interpreter leaving without pytest's teardown); it tries everything and only
  then raises if anything could not be undone, so a leak is loud, never silent.
- A busy mount (a test left a file open) is detached lazily and its loop device marked
  autoclear, so the kernel frees both once the last reference goes.
- The private directory's name carries the owning pid: a new :class:`Mounts` sweeps the mounts,
  loop devices and images of a session that was killed outright (SIGKILL, OOM) before it could
  clean up. Live sessions (xdist workers) are never touched.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

#: Images live on a tmpfs so loop filesystems are not slowed by the host disk (sparse: cheap).
DEFAULT_ROOT: Final = "/dev/shm"
PREFIX: Final = "artifactkit-mounts-"
_OWNED: Final = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _unescape(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(base: Path | str) -> list[str]:
    """Mount points at or below ``base``, deepest (most recently stacked) last, from /proc/self/mounts."""
    prefix = str(base).rstrip("/") + "/"
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        points = [_unescape(line.split()[1]) for line in handle]
    return [p for p in points if p == str(base) or p.startswith(prefix)]


def loops_under(base: Path | str) -> list[str]:
    """Loop devices whose backing file is at or below ``base`` (from sysfs: no parsing of losetup)."""
    prefix = str(base).rstrip("/") + "/"
    found = []
    for backing in sorted(Path("/sys/block").glob("loop*/loop/backing_file")):
        with contextlib.suppress(OSError):
            if backing.read_text(encoding="utf-8").strip().startswith(prefix):
                found.append("/dev/" + backing.parent.parent.name)
    return found


def _backing_file(device: str) -> str | None:
    try:
        return (Path("/sys/block") / Path(device).name / "loop" / "backing_file").read_text(
            encoding="utf-8").strip()
    except OSError:
        return None  # detached (or never a loop device)


def _unmount(point: str) -> str | None:
    """Unmount ``point``; a busy one lazily. Returns an error message, or None when it is gone."""
    try:
        _run("umount", point)
    except RuntimeError:
        try:
            _run("umount", "-l", point)  # still busy: detach now, the kernel frees it on last close
        except RuntimeError as err:
            return str(err)
    return None


def _detach(device: str, image: str) -> str | None:
    # Only the device still backed by *our* image: a freed number may already serve another session.
    if _backing_file(device) != image:
        return None
    try:
        _run("losetup", "-d", device)  # on a still-busy device this sets autoclear (a lazy detach)
    except RuntimeError as err:
        return str(err)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(root: str = DEFAULT_ROOT) -> list[str]:
    """Undo what killed sessions left under ``root``; returns the private directories removed."""
    swept = []
    for entry in sorted(Path(root).glob(PREFIX + "*")):
        match = _OWNED.match(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        errors = [e for p in reversed(mounts_under(entry)) if (e := _unmount(p))]
        errors += [e for d in loops_under(entry) if (e := _detach(d, _backing_file(d) or ""))]
        if not errors:
            _remove_tree(entry)
            swept.append(entry.name)
    return swept


def _remove_tree(path: Path) -> None:
    # --one-file-system: never descend into a mount that somehow survived.
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False, capture_output=True)


class Mounts:
    """A factory of real mounts under one private directory; use as a context manager."""

    def __init__(self, base: str | None = None) -> None:
        root = base or DEFAULT_ROOT
        sweep_stale(root)
        self.base = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
        self._mounted: list[Path] = []
        self._loops: list[tuple[str, str]] = []  # (device, backing image)
        self._shared: dict[str, Path] = {}
        self._count = 0
        atexit.register(self.close)

    def _next(self, label: str) -> str:
        self._count += 1
        return f"{self._count:02d}-{label}"

    def _point(self, label: str) -> Path:
        point = self.base / self._next(label)
        point.mkdir()
        return point

    def mount(self, fstype: str, source: str, label: str, options: str = "") -> Path:
        point = self._point(label)
        argv = ["mount", "-t", fstype]
        if options:
            argv += ["-o", options]
        # Recorded before mount(8) runs: a mount that half-succeeds is still unmounted at close.
        self._mounted.append(point)
        _run(*argv, source, str(point))
        return point

    def shared(self, key: str, build: Callable[[Mounts], Path]) -> Path:
        """``build(self)`` once per ``key`` for the life of this factory (a session shares mounts)."""
        if key not in self._shared:
            self._shared[key] = build(self)
        return self._shared[key]

    def tmpfs(self, options: str = "relatime", size: str = "256m") -> Path:
        return self.mount("tmpfs", "artifactkit-test", f"tmpfs-{options.replace(',', '-')}",
                          f"{options},size={size}")

    def ramfs(self) -> Path:
        return self.mount("ramfs", "artifactkit-test", "ramfs")

    def image(self, label: str, size_mb: int) -> Path:
        # A fresh name every time: reusing one would truncate the image under a mounted filesystem.
        path = self.base / f"{self._next(label)}.img"
        with path.open("xb") as handle:
            handle.truncate(size_mb << 20)
        return path

    def loop(self, image: Path) -> str:
        device = _run("losetup", "--find", "--show", str(image)).strip()
        self._loops.append((device, str(image)))
        return device

    def loop_fs(self, fstype: str, mkfs: tuple[str, ...], size_mb: int, label: str,
                mount_options: str = "") -> Path:
        """mkfs an image of ``size_mb`` with ``mkfs`` (argv before the image) and loop-mount it."""
        image = self.image(label, size_mb)
        _run(*mkfs, str(image))
        return self.mount(fstype, self.loop(image), label, mount_options)

    def ext4(self, mount_options: str = "relatime", mkfs_args: tuple[str, ...] = (), size_mb: int = 64) -> Path:
        label = "ext4-" + (mount_options.replace(",", "-") or "defaults") + ("-I128" if "128" in mkfs_args else "")
        return self.loop_fs("ext4", ("mkfs.ext4", "-q", "-F", *mkfs_args), size_mb, label, mount_options)

    def xfs(self, mount_options: str = "", size_mb: int = 300) -> Path:
        # 300 MiB is mkfs.xfs's minimum data size (xfsprogs >= 5.19); the image is sparse.
        return self.loop_fs("xfs", ("mkfs.xfs", "-q", "-f"), size_mb, "xfs", mount_options)

    def btrfs(self, mount_options: str = "", size_mb: int = 128) -> Path:
        # btrfs refuses images under ~109 MiB with its default (non-mixed) profiles.
        return self.loop_fs("btrfs", ("mkfs.btrfs", "-q", "-f"), size_mb, "btrfs", mount_options)

    def overlay(self, mount_options: str = "") -> Path:
        """overlay with its lower, upper and work dirs on a fresh ext4; a file in lower gets copied up."""
        under = self.ext4("")
        for name in ("lower", "upper", "work"):
            (under / name).mkdir()
        (under / "lower" / "from-lower").write_bytes(b"lower layer\n")
        layers = f"lowerdir={under}/lower,upperdir={under}/upper,workdir={under}/work"
        return self.mount("overlay", "overlay", "overlay", ",".join(filter(None, (layers, mount_options))))

    def close(self) -> None:
        """Unmount everything (reverse order), detach every loop device, remove the directory.

        Idempotent. Tries every step, then raises one error naming whatever is left.
        """
        errors = [e for point in reversed(self._mounted) if os.path.ismount(point) and (e := _unmount(str(point)))]
        self._mounted.clear()
        errors += [e for device, image in reversed(self._loops) if (e := _detach(device, image))]
        self._loops.clear()
        self._shared.clear()
        if not errors and self.base.exists():
            _remove_tree(self.base)
        atexit.unregister(self.close)
        if errors:
            raise RuntimeError("could not undo every test mount: " + "; ".join(errors))

    def __enter__(self) -> Mounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def mounted_here() -> set[str]:
    """Mount points currently listed in /proc/self/mounts (for leak checks)."""
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        return {line.split()[1] for line in handle}


def attached_loops() -> str:
    return _run("losetup", "-a")


def is_root() -> bool:
    return os.geteuid() == 0

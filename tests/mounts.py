"""Create and always tear down real filesystems for tests (root only).

Every mount made here is recorded before it is used, and :meth:`Mounts.close` unmounts them and
detaches every loop device it attached, in reverse order, even after a failing test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


class Mounts:
    """A factory of real mounts under one private directory; use as a context manager."""

    def __init__(self, base: str | None = None) -> None:
        # Images live on a tmpfs so loop filesystems are not slowed by the host disk.
        self.base = Path(tempfile.mkdtemp(prefix="artifactkit-mounts-", dir=base or "/dev/shm"))
        self._mounted: list[Path] = []
        self._loops: list[str] = []
        self._count = 0

    def _point(self, label: str) -> Path:
        self._count += 1
        point = self.base / f"{self._count:02d}-{label}"
        point.mkdir()
        return point

    def mount(self, fstype: str, source: str, label: str, options: str = "") -> Path:
        point = self._point(label)
        argv = ["mount", "-t", fstype]
        if options:
            argv += ["-o", options]
        _run(*argv, source, str(point))
        self._mounted.append(point)
        return point

    def tmpfs(self, options: str = "relatime", size: str = "256m") -> Path:
        return self.mount("tmpfs", "artifactkit-test", f"tmpfs-{options.replace(',', '-')}",
                          f"{options},size={size}")

    def ramfs(self) -> Path:
        return self.mount("ramfs", "artifactkit-test", "ramfs")

    def image(self, label: str, size_mb: int) -> Path:
        path = self.base / f"{label}.img"
        with path.open("wb") as handle:
            handle.truncate(size_mb << 20)
        return path

    def loop(self, image: Path) -> str:
        device = _run("losetup", "--find", "--show", str(image)).strip()
        self._loops.append(device)
        return device

    def ext4(self, mount_options: str = "relatime", mkfs_args: tuple[str, ...] = (), size_mb: int = 64) -> Path:
        image = self.image("ext4" + "".join(mkfs_args).replace(" ", ""), size_mb)
        _run("mkfs.ext4", "-q", "-F", *mkfs_args, str(image))
        device = self.loop(image)
        label = "ext4-" + mount_options.replace(",", "-") + ("-I128" if "128" in mkfs_args else "")
        return self.mount("ext4", device, label, mount_options)

    def close(self) -> None:
        for point in reversed(self._mounted):
            with contextlib.suppress(RuntimeError):
                _run("umount", "-l", str(point))
        self._mounted.clear()
        for device in reversed(self._loops):
            with contextlib.suppress(RuntimeError):
                _run("losetup", "-d", device)
        self._loops.clear()
        with contextlib.suppress(OSError):
            subprocess.run(["rm", "-rf", "--one-file-system", str(self.base)], check=False)

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

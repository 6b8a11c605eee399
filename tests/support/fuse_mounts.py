"""Start and always tear down the FUSE filesystems of the matrix: sshfs, weed mount, s3fs, rclone mount, bindfs,
mergerfs, squashfuse (root only; see tests/support/fuse_servers.py for what they mount from).

Every daemon runs in the foreground as our child, in its own session, and its mount point is recorded
before it starts: :meth:`FuseMounts.close` unmounts each (``fusermount3 -u``, lazily when busy) in reverse
order and then stops the daemon, even after a failing test. A mount counts as started once
/proc/self/mountinfo lists it with the FUSE type expected; one that does not appear within
``START_TIMEOUT_S`` is an error carrying the daemon's own output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.support.capability import require_mounts, require_real_root, skip_or_fail
from tests.support.fuse_servers import Sshd, die_with_parent, filer_address, new_bucket, stop_process
from tests.support.mounts import Mounts, mounts_under

DEFAULT_ROOT: Final = "/dev/shm"
PREFIX: Final = "artifactkit-fuse-"
_OWNED: Final = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")
#: The matrix's mounts start in 0.1-2 s here; weed mount subscribes to the filer first and is the slowest.
START_TIMEOUT_S: Final = 10.0

#: Each FUSE tool, the Debian package (or pip package) it comes from.
TOOLS: Final = {
    "sshfs": "sshfs", "sshd": "openssh-server", "s3fs": "s3fs", "rclone": "rclone", "bindfs": "bindfs",
    "mergerfs": "mergerfs", "squashfuse": "squashfuse", "mksquashfs": "squashfs-tools", "fusermount3": "fuse3",
}


def require_fuse_tools(*tools: str) -> None:
    """Real root (a loopback sshd, FUSE mounts of other users' files), /dev/fuse, and each tool named."""
    require_mounts()
    require_real_root("start FUSE daemons and a loopback sshd for the FUSE rows")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        skip_or_fail("needs /dev/fuse for the FUSE rows of the filesystem matrix")
    for tool in ("fusermount3", *tools):
        found = shutil.which(tool) or (tool == "sshd" and os.access("/usr/sbin/sshd", os.X_OK))
        if not found:
            skip_or_fail(f"needs {tool} from Debian's {TOOLS.get(tool, tool)} for the FUSE rows (.ci/run installs it)")


@dataclass(frozen=True)
class FuseMount:
    """A started FUSE mount: where it is, what it serves from (None for a bucket), how long it took."""

    point: Path
    backing: Path | None
    fs_type: str
    started_s: float


def _fs_type_at(point: Path) -> str | None:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            if left.split()[4] == str(point):
                return right.split()[0]
    return None


def _unmount(point: Path) -> str | None:
    for argv in (["fusermount3", "-u", str(point)], ["fusermount3", "-uz", str(point)]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode == 0 or _fs_type_at(point) is None:
            return None
    return f"fusermount3 -uz {point}: {done.stderr.strip()}"


def sweep_stale(root: str = DEFAULT_ROOT) -> None:
    """Unmount what a killed session left (its daemons exit once their mount is gone)."""
    for entry in Path(root).glob(PREFIX + "*"):
        match = _OWNED.match(entry.name)
        if match is None or os.path.exists(f"/proc/{match.group(1)}"):
            continue
        for point in reversed(mounts_under(entry)):
            _unmount(Path(point))
        if not mounts_under(entry):
            shutil.rmtree(entry, ignore_errors=True)


class FuseMounts:
    """FUSE daemons and their mount points under one private directory; backing tmpfs mounts come from ``mounts``."""

    def __init__(self, mounts: Mounts, root: str = DEFAULT_ROOT) -> None:
        sweep_stale(root)
        self.mounts = mounts
        self.base = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
        self._started: list[tuple[Path, subprocess.Popen[bytes]]] = []
        self._count = 0

    def path(self, label: str) -> Path:
        self._count += 1
        path = self.base / f"{self._count:02d}-{label}"
        path.mkdir()
        return path

    def start(self, label: str, argv: Callable[[Path], Sequence[str]], fs_type: str, *, backing: Path | None = None,
              unset: Sequence[str] = ()) -> FuseMount:
        """Run ``argv(point)`` (a foreground FUSE daemon) and wait until ``point`` is a ``fs_type`` mount."""
        point = self.path(label)
        log_path = self.base / f"{point.name}.log"
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(list(argv(point)), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env={k: v for k, v in os.environ.items() if k not in unset},
                                    start_new_session=True, cwd=self.base,
                                    preexec_fn=die_with_parent)  # noqa: PLW1509 - only prctl, no lock taken
        self._started.append((point, proc))
        while _fs_type_at(point) != fs_type:
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                output = log_path.read_text(encoding="utf-8", errors="replace").strip()[-800:]
                raise RuntimeError(f"{label}: {fs_type} not mounted at {point} after "
                                   f"{time.monotonic() - started:.1f} s (exit {proc.poll()}): {output}")
            time.sleep(0.02)
        return FuseMount(point, backing, fs_type, time.monotonic() - started)

    def close(self) -> None:
        """Unmount every mount (reverse order), stop every daemon, remove the directory; raise naming leftovers."""
        errors = [e for point, _ in reversed(self._started) if _fs_type_at(point) and (e := _unmount(point))]
        for _, proc in reversed(self._started):
            stop_process(proc)
        self._started.clear()
        if not errors and not mounts_under(self.base):
            shutil.rmtree(self.base, ignore_errors=True)
        if errors:
            raise RuntimeError("could not undo every FUSE mount: " + "; ".join(errors))

    def __enter__(self) -> FuseMounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the rows ---------------------------------------------------------------------------------

    def backing_dir(self, label: str) -> Path:
        """A directory on a fresh relatime tmpfs: reads move a historical atime there at once."""
        return self.mounts.tmpfs("relatime", size="128m")

    def sshfs(self, sshd: Sshd, label: str, options: str = "") -> FuseMount:
        backing = self.backing_dir(label)
        extra = ["-o", options] if options else []
        return self.start(label, lambda point: ["sshfs", "-f", f"root@127.0.0.1:{backing}", str(point),
                                                *sshd.sshfs_options(), *extra], "fuse.sshfs", backing=backing)

    def bindfs(self, label: str = "bindfs", options: Sequence[str] = ()) -> FuseMount:
        backing = self.backing_dir(label)
        return self.start(label, lambda point: ["bindfs", "-f", "--no-allow-other", *options, str(backing),
                                                str(point)], "fuse", backing=backing)  # bindfs names itself "fuse"

    def mergerfs(self, label: str = "mergerfs", options: str = "") -> FuseMount:
        backing = self.backing_dir(label)
        opts = ",".join(filter(None, ("minfreespace=0", options)))
        return self.start(label, lambda point: ["mergerfs", "-f", "-o", opts, str(backing), str(point)],
                          "fuse.mergerfs", backing=backing)

    def squashfuse(self) -> FuseMount:
        content = self.path("squash-content")
        (content / "file").write_bytes(b"read-only\n")
        image = self.base / "image.squashfs"
        subprocess.run(["mksquashfs", str(content), str(image), "-quiet", "-noappend"], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL)
        return self.start("squashfuse", lambda point: ["squashfuse", "-f", str(image), str(point)],
                          "fuse.squashfuse", backing=None)

    def weed(self, endpoint: Any, label: str = "weed", options: Sequence[str] = ()) -> FuseMount:
        cache = self.path(f"{label}-cache")
        return self.start(label, lambda point: [_weed(), "mount", f"-filer={filer_address(endpoint)}",
                                                f"-dir={point}", f"-cacheDir={cache}", "-allowOthers=false",
                                                *options], "fuse.seaweedfs")

    def s3fs(self, endpoint: Any, label: str = "s3fs", options: str = "") -> FuseMount:
        bucket = new_bucket(endpoint, f"{label}-{os.getpid()}-{self._count}")
        secrets = self.base / f"{label}.passwd"
        secrets.write_text(f"{endpoint.access_key}:{endpoint.secret_key}\n", encoding="ascii")
        secrets.chmod(0o600)
        opts = ",".join(filter(None, (f"url={endpoint.url}", "use_path_request_style", f"passwd_file={secrets}",
                                      options)))
        return self.start(label, lambda point: ["s3fs", bucket, str(point), "-f", "-o", opts], "fuse.s3fs")

    def rclone(self, endpoint: Any, label: str = "rclone", options: Sequence[str] = ()) -> FuseMount:
        bucket = new_bucket(endpoint, f"{label}-{os.getpid()}-{self._count}")
        config = self.base / f"{label}.conf"
        config.write_text("[weed]\ntype = s3\nprovider = SeaweedFS\nenv_auth = false\n"
                          f"access_key_id = {endpoint.access_key}\nsecret_access_key = {endpoint.secret_key}\n"
                          f"endpoint = {endpoint.url}\n", encoding="ascii")
        config.chmod(0o600)
        cache = self.path(f"{label}-cache")
        return self.start(label, lambda point: ["rclone", "mount", f"weed:{bucket}", str(point), "--config",
                                                str(config), "--cache-dir", str(cache), *options], "fuse.rclone",
                          # a CA bundle in the environment makes rclone refuse its own http transport (rclone 1.60)
                          unset=("AWS_CA_BUNDLE",))


def _weed() -> str:
    from tests.support.seaweedfs import find_weed

    return find_weed()


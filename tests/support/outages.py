"""A SeaweedFS of a test's own that it can take away for a while and give back where clients point.

``pause(seconds)`` stops the server with SIGSTOP and resumes it with SIGCONT (an endpoint that accepts
connections and does not answer: a stalled gateway); ``kill(seconds)`` SIGKILLs it and starts it again after
``seconds`` on the same ports and data dir (an endpoint that refuses connections: a restart behind a load
balancer). Both return at once: the outage runs while the caller's operation goes on. ``outage_started``
is set when the server went away, ``back`` once it answers again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


class OutageServer:
    """One ``weed mini`` on fixed ports, restartable on its data dir (the AWS environment follows it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self._data = tempfile.mkdtemp(prefix="artifactkit-weed-outage-")
        self._keys = {"access_key": "ak" + secrets.token_hex(8), "secret_key": secrets.token_hex(20)}
        self._cm: Any = None
        self._ports: dict[str, int] | None = None
        self._timers: list[threading.Thread] = []
        self.endpoint: Any = None
        self.outage_started = threading.Event()
        self.back = threading.Event()
        self.outage_s = 0.0  # how long the server was away, once it is back

    def start(self) -> None:
        from tests.store.s3.conftest import aws_env
        from tests.support.seaweedfs import running_seaweedfs

        self._cm = running_seaweedfs(self._data, ports=self._ports, **self._keys)
        self.endpoint = self._cm.__enter__()
        self._ports = dict(self.endpoint.ports)
        for key, value in aws_env(self.endpoint).items():
            self._monkeypatch.setenv(key, value)

    def url(self, prefix: str) -> str:
        return f"s3://{self.endpoint.bucket}/{prefix}"

    def pause(self, seconds: float) -> None:
        """SIGSTOP now, SIGCONT in ``seconds``."""
        pid, began = self.endpoint.pid, time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        self.outage_started.set()

        def resume() -> None:
            time.sleep(seconds)
            os.kill(pid, signal.SIGCONT)
            self.outage_s = time.monotonic() - began
            self.back.set()
        self._later(resume)

    def kill(self, seconds: float | None) -> None:
        """SIGKILL now (and reaped, so its ports refuse at once); started again on the same ports and data dir
        ``seconds`` later, or not at all (``None``: :meth:`start` brings it back)."""
        began = time.monotonic()
        os.kill(self.endpoint.pid, signal.SIGKILL)
        self.stop()
        self.outage_started.set()
        if seconds is None:
            return

        def restart() -> None:
            time.sleep(seconds)
            self.start()
            self.outage_s = time.monotonic() - began
            self.back.set()
        self._later(restart)

    def _later(self, action: Any) -> None:
        thread = threading.Thread(target=action, name="outage", daemon=True)
        thread.start()
        self._timers.append(thread)

    def stop(self) -> None:
        if self._cm is not None:
            cm, self._cm, self.endpoint = self._cm, None, None
            cm.__exit__(None, None, None)

    def close(self) -> None:
        for thread in self._timers:
            thread.join()
        with contextlib.suppress(ProcessLookupError, TypeError, AttributeError):
            os.kill(self.endpoint.pid, signal.SIGCONT)  # never leave a stopped server behind
            # Its data goes with it, so no graceful stop: once paused and resumed, weed took the whole 10 s of
            # its stop timeout to end on SIGTERM (a test's teardown, twice per run of the suite).
            os.kill(self.endpoint.pid, signal.SIGKILL)
        self.stop()
        subprocess.run(["rm", "-rf", self._data], check=False)


@pytest.fixture
def outage_server(monkeypatch: pytest.MonkeyPatch, seaweedfs: Any) -> Iterator[OutageServer]:
    """An :class:`OutageServer`, started (``seaweedfs`` only for its skip: no ``weed``, no test)."""
    server = OutageServer(monkeypatch)
    server.start()
    try:
        yield server
    finally:
        server.close()

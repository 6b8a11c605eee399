"""A child process a test starts and interrupts: never left running, whatever the test's assertion did."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def reaped(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """``process`` for the block; killed and waited for after it if it is still running then."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

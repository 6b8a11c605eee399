"""A round trip run in a child process (under a fault it needs from the start: refused threads, an ``EINTR`` shim)
held to the reference engine's run of the same tree in this process: the same manifest digest, and every
download restoring exactly what was published."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from artifactkit import Store
from artifactkit.metadata.model import FileMeta
from tests.support.engines import running_on


def reference_publish(src: Path, store: Path) -> tuple[str, Sequence[FileMeta]]:
    """The reference engine's publish of ``src`` into a new store at ``store``: its digest and entries."""
    with running_on("python"):
        reference = Store(store)
        digest = reference.publish(src, "t").digest
        return digest, reference.manifest("t").entries


def run_child(script: str, args: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """``script`` run by this interpreter with ``args``: the JSON object its last line of stdout prints."""
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def assert_restored(dest: Path, published: Sequence[FileMeta], scratch: Path) -> None:
    """``dest`` holds exactly what was published: the reference captures every entry as it is (the manifests'
    digests would differ only by each tree's ctimes, which no restore can set)."""
    with running_on("python"):
        again = Store(scratch)
        again.publish(dest, "t")
        assert again.manifest("t").entries == published, dest

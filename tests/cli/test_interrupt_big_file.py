"""Ctrl-C while a download or a publish is inside one big file ends the command at once, on both engines: exit
130, one line, no destination, no version and no staging left. The core looked for signals only between its units
of work (a download) or its batches (a publish), so a 24 GiB file ran to its end first (13-21 s); this file's hole
alone would hash for about ten minutes (1 TiB of zeros).

A sparse file of 1 TiB takes no space: the publish's source is one; the download's store is a hostile writer's, a
blob of 1 TiB of hole under a name no content has, and a manifest entry claiming exactly that size with no data.
The command is interrupted by a real SIGINT once it has made the file's copy (so it is inside the copy); it must
be gone well within a minute, against the ten it needs to finish the file."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from artifactkit import Store
from tests.native.trees import File, build
from tests.support.eintr import shim
from tests.support.engines import ENGINE_NAMES, running_on
from tests.support.hostile_store import forge_manifest, manifest_doc
from tests.support.processes import reaped

TIB = 1 << 40
FAKE = "ab" * 32  # a digest no content here has: the download would refuse it, after the hash


def _store_with_one_huge_hole(root: Path) -> Store:
    (root / "src").mkdir(parents=True)
    build(root / "src", [File("big", b"x", hole=4096)])
    store = Store(root / "store")
    ref = store.publish(root / "src", "demo")
    doc = manifest_doc(store, ref)
    entry = next(e for e in doc["entries"] if e["path"] == "big")
    entry.update(sha256=FAKE, size=TIB, extents=[])
    forge_manifest(store, "demo", 1, json.dumps(doc).encode())
    with open(os.path.join(store.layout.blobs_dir, FAKE), "wb") as blob:
        os.ftruncate(blob.fileno(), TIB)  # all hole: no space taken
    return store


def _wait_for(pattern: str, process: subprocess.Popen[str], deadline_s: float) -> None:
    # Waits for a state to act on (the file being made), not for a result: the verdict is the exit below.
    end = time.monotonic() + deadline_s
    while not glob.glob(pattern):
        assert process.poll() is None, f"the download ended before making the file: {process.communicate()}"
        assert time.monotonic() < end, "the download made no file"
        time.sleep(0.005)


def _interrupted(argv: list[str], engine: str, made: str, **env: str) -> tuple[int, str]:
    """The command's exit code and last line of stderr, after a SIGINT once ``made`` (a glob) exists."""
    with running_on(engine):
        started = subprocess.Popen(["artifactkit", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, **env})
    with reaped(started) as process:
        _wait_for(made, process, 60)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ctrl_c_inside_one_huge_file_ends_the_download_at_once(fast_tmp: Path, engine: str) -> None:
    store = _store_with_one_huge_hole(fast_tmp)
    made = str(fast_tmp / ".out.artifactkit-*" / "tree" / "big")
    argv = ["download", "demo", str(fast_tmp / "out"), "--store", str(store.root)]
    assert _interrupted(argv, engine, made) == (130, "artifactkit: error: interrupted")
    assert sorted(p.name for p in fast_tmp.iterdir()) == ["src", "store"]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ctrl_c_inside_one_huge_file_ends_the_publish_at_once(fast_tmp: Path, engine: str) -> None:
    (fast_tmp / "src").mkdir()
    with open(fast_tmp / "src" / "big", "wb") as big:
        os.ftruncate(big.fileno(), TIB)
    store = fast_tmp / "store"
    argv = ["publish", str(fast_tmp / "src"), "--store", str(store), "--name", "demo"]
    made = str(store / "staging" / "*" / "blob-*")
    assert _interrupted(argv, engine, made) == (130, "artifactkit: error: interrupted")
    assert Store(store).list() == []
    assert os.listdir(store / "staging") == []


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ctrl_c_ends_a_publish_whose_open_a_signal_keeps_interrupting(fast_tmp: Path, engine: str) -> None:
    # An open that fails with EINTR for ever (tests/support/eintr.py's AK_EINTR_STUCK): CPython retries it (PEP 475)
    # until a handler raises; the core retried it past the Ctrl-C, spinning, and only SIGKILL ended it.
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "stuck").write_bytes(b"x" * 100)
    (fast_tmp / "src" / "ok").write_bytes(b"y")
    store = fast_tmp / "store"
    argv = ["publish", str(fast_tmp / "src"), "--store", str(store), "--name", "demo"]
    got = _interrupted(argv, engine, str(store / "staging" / "publish-*"), LD_PRELOAD=str(shim()),
                       AK_EINTR_STUCK="stuck")
    assert got == (130, "artifactkit: error: interrupted")
    assert Store(store).list() == [] and os.listdir(store / "staging") == []

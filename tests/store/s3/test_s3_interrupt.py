"""A bucket publish keeps its larger files in a local staging directory in the temp dir until they are uploaded:
interrupted (one Ctrl-C or three) it leaves none behind, and one a killed publish left is swept by the next bucket
publish. Issue 53 found a killed publish's ``artifactkit-s3-publish-*`` left in the temp dir for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.store.s3.local_staging import STAGING_PREFIX
from tests.support.processes import reaped

#: Over the in-memory limit (8 MiB): staged in the local directory while hashed.
BIG = 9 << 20
FILES = 12


def _big_tree(root: Path) -> Path:
    root.mkdir()
    for index in range(FILES):
        (root / f"big{index}").write_bytes(os.urandom(BIG))
    return root


def _stagings(tmp: Path) -> list[str]:
    return sorted(name for name in os.listdir(tmp) if name.startswith(STAGING_PREFIX))


def _signalled_once_staging(src: Path, url: str, tmp: Path, signals: list[signal.Signals]) -> tuple[int, str]:
    """``artifactkit publish`` into ``url`` with ``TMPDIR=tmp``, sent ``signals`` (0.1 s apart) once its staging
    holds a file; its exit code and stderr."""
    command = [sys.executable, "-m", "artifactkit.cli", "publish", str(src), "--store", url, "--name", "demo"]
    with reaped(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "TMPDIR": str(tmp)})) as process:
        deadline = time.monotonic() + 120  # a bound on a hang, not a delay
        while not any(len(os.listdir(tmp / name)) > 1 for name in _stagings(tmp)):  # its marker, and a file
            assert process.poll() is None, f"ended before staging a file: {process.communicate()}"
            assert time.monotonic() < deadline, "the publish never staged a file"
            time.sleep(0.002)
        for number, sent in enumerate(signals):
            if number:
                time.sleep(0.1)
            if process.poll() is None:
                process.send_signal(sent)
        _, err = process.communicate(timeout=60)
    return process.returncode, err


@pytest.mark.parametrize("presses", [1, 3])
def test_an_interrupted_bucket_publish_leaves_no_local_staging(s3_url: str, fast_tmp: Path, presses: int) -> None:
    src, tmp = _big_tree(fast_tmp / "src"), fast_tmp / "tmp"
    tmp.mkdir()
    code, err = _signalled_once_staging(src, s3_url, tmp, [signal.SIGINT] * presses)
    assert code == 130 and "Traceback" not in err, err
    assert _stagings(tmp) == []
    assert Store(s3_url).list() == []


def test_the_staging_a_killed_bucket_publish_left_is_swept_by_the_next(
        s3_url: str, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, tmp = _big_tree(fast_tmp / "src"), fast_tmp / "tmp"
    tmp.mkdir()
    code, _ = _signalled_once_staging(src, s3_url, tmp, [signal.SIGKILL])
    assert code == -signal.SIGKILL
    left = _stagings(tmp)
    assert len(left) == 1  # a kill runs no cleanup: the next publish's to take
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    (src / "small").write_text("a publish of its own\n")
    Store(s3_url).publish(src, "demo")
    assert _stagings(tmp) == []

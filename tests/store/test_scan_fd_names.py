"""A publish whose listing or ``fstat`` of a source directory fails names the directory, not the fd.

No real filesystem fails those calls on an open directory on demand, so the reference engine's own calls are
made to fail as CPython reports them (``os.listdir(fd)``: the fd's number as the filename; ``os.fstat``: no
filename). The native core names the same path (``native/src/scan/directory.rs``: ``list_dir`` and
``capture_dir`` map the errno with the directory's path, as ``_scan_dir``'s ``naming(top)`` does).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from artifactkit import Store
from artifactkit.cli.main import main


def _failing_on(call: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = getattr(os, call)

    def fail_there(target: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(target, int) and os.readlink(f"/proc/self/fd/{target}") == str(directory):
            raise OSError(errno.EIO, os.strerror(errno.EIO), *((target,) if call == "listdir" else ()))
        return real(target, *args, **kwargs)
    monkeypatch.setattr(os, call, fail_there)


@pytest.mark.parametrize("call", ["listdir", "fstat"])
def test_a_source_directory_that_cannot_be_listed_is_named_by_its_path(
        reference_engine: None, fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], call: str) -> None:
    src = fast_tmp / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_bytes(b"x")
    with monkeypatch.context() as patch:  # undone before fast_tmp's removal, which lists and stats too
        _failing_on(call, src / "sub", patch)
        with pytest.raises(OSError) as caught:
            Store(fast_tmp / "store").publish(src, "demo")
        code = main(["publish", str(src), "--name", "demo", "--store", str(fast_tmp / "store")])
    assert (caught.value.errno, caught.value.filename) == (errno.EIO, str(src / "sub")), repr(caught.value)
    assert code == 2
    assert capsys.readouterr().err == f"artifactkit: error: {src / 'sub'}: {call}: Input/output error\n"

"""A call interrupted by a signal (``EINTR``) is retried where CPython retries it (PEP 475), on both engines: a
publish and a download go on and give the same manifest and an exact restore, where the core used to raise
``InterruptedError`` for the first interrupted ``open``, ``fstat``, ``fchmod``, ``fchown``, ``ftruncate`` or
``openat2``. The interruptions are real returns of the C library functions (``tests/support/eintr.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.native.trees import File, build
from tests.support.child_round_trip import assert_restored, reference_publish, run_child
from tests.support.eintr import INTERRUPTIBLE, shim
from tests.support.engines import ENGINE_NAMES, running_on

CHILD = """
import ctypes, json, os, sys
from artifactkit import Store
from artifactkit.engine.select import engine_name
src, root = sys.argv[1], sys.argv[2]
shim = ctypes.CDLL(os.environ["AK_SHIM"])
shim.ak_eintr_failed.restype = ctypes.c_ulong
shim.ak_eintr_arm(1)
plain = Store(root + "/plain").publish(src, "t", workers=2)
Store(root + "/cached").publish(src, "t", workers=1, stat_cache=True)  # the capture that makes FileMeta
cached = Store(root + "/cached").publish(src, "t", workers=2, stat_cache=True)
Store(root + "/plain").download(plain, root + "/dest", workers=2)
Store(root + "/plain").download(plain, root + "/dest1", workers=1)
shim.ak_eintr_arm(0)
print(json.dumps({"plain": plain.digest, "cached": cached.digest, "engine": engine_name(),
                  "interrupted": shim.ak_eintr_failed()}))
"""


def _tree(src: Path) -> None:
    # Each kind of work the engines do: many small files (the pool), one past the in-memory limit (the copier
    # beside the hasher), a sparse one (truncated to its size on both sides), an empty one, a hard link and an
    # xattr. No symlink: reading its target moves its atime on this strictatime tmpfs.
    files = [File(f"d{i % 4}/f{i:02d}", b"%d\n" % i, times=(10**18 + i, 2 * 10**18 - i)) for i in range(24)]
    files += [File("big.bin", os.urandom(9 << 20)), File("empty", b"", xattrs={"user.k": b"v"}),
              File("sparse", b"data", hole=1 << 20, mode=0o640)]
    build(src, files, dirs=[f"d{i}" for i in range(4)], hardlinks={"d0/again": "d1/f01"})


@pytest.mark.parametrize("call", sorted(INTERRUPTIBLE))
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_an_interrupted_call_is_retried_and_the_round_trip_is_exact(engine: str, call: str, fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    _tree(src)
    expected, published = reference_publish(src, fast_tmp / "reference")
    with running_on(engine):
        env = {**os.environ, "AK_SHIM": str(shim()), "LD_PRELOAD": str(shim()), "AK_EINTR": call}
        got = run_child(CHILD, [str(src), str(fast_tmp)], env)
    assert got["engine"] == engine
    assert got["interrupted"] > 0, f"no {call} was interrupted: the shim did not reach the engine"
    assert (got["plain"], got["cached"]) == (expected, expected)
    for dest in ("dest", "dest1"):  # each download restored exactly what was published
        assert_restored(fast_tmp / dest, published, fast_tmp / f"again-{dest}")

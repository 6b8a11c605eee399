"""Where the system refuses the core every thread it asks for, a publish and a download still complete, on the
calling thread, with the reference's manifest: std's thread spawn panics on a refusal, and no panic may reach
Python (``native/src/sys/threads.rs``; a ``pyo3_runtime.PanicException`` before it).

The refusal is made real, not mocked: ``RUST_MIN_STACK`` of a size no system maps makes every Rust thread's
stack allocation fail (``EAGAIN`` from ``pthread_create``, as under ``RLIMIT_NPROC`` or a cgroup's
``pids.max``). It must be set before the process starts its first Rust thread, hence a child process.
Python's own threads (the publish's mover) are not Rust's and still start.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from tests.native.trees import File, build
from tests.support.child_round_trip import assert_restored, reference_publish, run_child

#: Every spawn through std asks for a stack this big; no address space has it.
UNMAPPABLE_STACK = str(1 << 47)

CHILD = """
import json, sys
from artifactkit import Store
src, root = sys.argv[1], sys.argv[2]
plain = Store(root + "/plain").publish(src, "t", workers=2)
Store(root + "/cached").publish(src, "t", workers=2, stat_cache=True)  # the capture that makes FileMeta
cached = Store(root + "/cached").publish(src, "t", workers=2, stat_cache=True)
Store(root + "/plain").download(plain, root + "/dest", workers=2)
print(json.dumps({"plain": plain.digest, "cached": cached.digest}))
"""


def _tree(src: Path) -> None:
    # What takes each thread of the core: a file past the in-memory limit (the copier beside the hasher), a
    # directory of more names than the scan splits (32) and several beside it (captured ahead), many small
    # files (the pool) and an empty one. No symlink: reading its target moves its atime on this strictatime
    # tmpfs, so the publishes compared here would each record another.
    files = [File(f"wide/f{i:03d}", b"%d\n" % i) for i in range(40)]
    files += [File(f"d{i}/g", b"g%d" % i) for i in range(6)]
    files += [File("big.bin", os.urandom(12 << 20)), File("empty", b"")]
    build(src, files, dirs=["wide", *(f"d{i}" for i in range(6))])


def test_a_publish_and_a_download_complete_on_the_calling_thread_where_no_thread_starts(
        native: ModuleType, fast_tmp: Path) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    _tree(src)
    expected, published = reference_publish(src, fast_tmp / "reference")
    env = {**os.environ, "ARTIFACTKIT_ENGINE": "native", "RUST_MIN_STACK": UNMAPPABLE_STACK}
    got = run_child(CHILD, [str(src), str(fast_tmp)], env)
    assert got == {"plain": expected, "cached": expected}
    assert_restored(fast_tmp / "dest", published, fast_tmp / "again")

"""A publish's memory per entry stays bounded on both engines (issue 28's scale line: a 100,000-file publish
must not need more memory than before the native core, 223 MB).

Each engine publishes 5,000 files of 256 bytes in 50 directories (the scale benchmark's shape at 1/20th) in a
fresh interpreter, twice: once under ``tracemalloc`` (exact and deterministic, but blind to the native core's
own allocations), once measuring the peak RSS above the level before the publish (``/proc/self/clear_refs``
resets the high-water mark; the core's buffers count there). Not a timed test: memory does not move with the
machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.capability import require_module

FILES = 5000
DIRS = 50

#: What a publish holds per entry at its peak, the manifest's assembly: the scan's ``FileMeta`` and identity
#: (about 470 bytes), its read (``Staged``, digest and position: 240), the store's note of the staged file (40)
#: and the manifest's line, once or more. The reference's lines are ``(path, line)`` pairs, then joined, then
#: encoded (each a manifest's worth, 290 bytes an entry here), no more than two alive at once: measured 1,549;
#: with all three at once it was 1,881. The native core's own buffers are invisible to tracemalloc (the RSS
#: bound watches them): measured 1,089. The blob moves beside the assembly hold one call's names (1,024
#: pairs): 1,575 and 1,125 (4,096 pairs, most of this tree's, took the reference to 1,718 on CI's Python).
#: Either bound fails a second copy of the entries (470 bytes).
TRACED_BOUND = {"python": 1700, "native": 1300}

#: The same peak in RSS, the core's allocations included, plus this size's share of what does not grow with the
#: tree (threads, 1 MiB buffers, allocator arenas: about 400 bytes an entry at 5,000): measured 1,837-1,889 on
#: both engines with the venv's CPython 3.11.7, and 2,412 on the native engine as CI's user with Debian's
#: CPython 3.11.2 (the same per-entry objects; more fixed memory: about 2.6 MB, 520 bytes an entry at this
#: size). The native core that held every entry decoded and a String per line took 2,740 on 3.11.7 (its
#: 100,000-file CLI publish, 302,556 KiB), so 2,600 still fails it there, and by more on 3.11.2.
RSS_BOUND = 2600

_CHILD = """
import gc, json, os, sys, tracemalloc
from artifactkit import Store

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

src, base = sys.argv[1:3]
os.makedirs(f"{base}/tiny")
Store(f"{base}/warm").publish(f"{base}/tiny", "warm")  # every module a publish imports, imported
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark starts again from the RSS of now
before = status("VmRSS")
Store(f"{base}/rss").publish(src, "tree")
rss = status("VmHWM") - before
tracemalloc.start()
Store(f"{base}/traced").publish(src, "tree")
print(json.dumps({"rss": rss, "traced": tracemalloc.get_traced_memory()[1]}))
"""


def _tree(root: Path) -> Path:
    src = root / "src"
    for d in range(DIRS):
        (src / f"d{d:03}").mkdir(parents=True)
        for f in range(FILES // DIRS):
            (src / f"d{d:03}" / f"f{f:05}.bin").write_bytes((b"%05d-%05d " % (d, f)) * 23 + b"x" * 3)
    return src


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_publish_holds_a_bounded_number_of_bytes_per_entry(fast_tmp: Path, engine: str) -> None:
    if engine == "native":
        require_module("artifactkit._native", "`pip install -e .` with cargo on PATH builds the native core")
    src = _tree(fast_tmp)
    assert sum(len(files) for _, _, files in os.walk(src)) == FILES
    # Python's own allocator settings would measure another interpreter than a user's.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", "PYTHONTRACEMALLOC")}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(fast_tmp / "stores")],
                          env={**env, "ARTIFACTKIT_ENGINE": engine}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    peak = json.loads(done.stdout)
    per_entry = {what: peak[what] / FILES for what in ("traced", "rss")}
    assert per_entry["traced"] <= TRACED_BOUND[engine], per_entry
    assert per_entry["rss"] <= RSS_BOUND, per_entry

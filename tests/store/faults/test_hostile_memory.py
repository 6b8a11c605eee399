"""What a forged manifest within the size limit costs ``verify`` and ``download`` in memory (issue 48, class 5).

An unknown key holding ``[[[...]]]`` 900 levels deep, repeated, cost 48 times the manifest's size (6.2 GiB for
128 MiB) where the docs promised at most 25: the reference decodes it whole, about 100 bytes a list, and the
core declined it to the reference. Now a manifest holding more lists and objects than its size pays for
(``manifest_limits.check_containers``) is refused before it is decoded, and every shape within the limits stays
within :data:`~artifactkit.store.manifest_limits.MAX_DECODED_FACTOR` times its size
(``diagnostics/results/manifest-memory.json`` measured them all; here the issue's shape, the old worst and the new).

Each case runs in a child process, whose peak RSS (``VmHWM``) is read before and after the operation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.store.manifest_limits import LIST_BYTES, MAX_DECODED_FACTOR
from tests.support.hostile_manifest import DATA, SHA, body, doc, file_entry
from tests.support.hostile_store import STORE_KINDS, forge_manifest, put_blob, store_of_kind

#: The forged manifests' size: large enough that the interpreter's own noise is a small part of the bound.
SIZE = 8 << 20


def _under_a_key_nobody_reads(unit: bytes, pad_to: int = 0) -> bytes:
    unit = unit.ljust(pad_to - 1)
    items = b",".join([unit] * (SIZE // (len(unit) + 1)))
    return body(doc(x="@")).replace(b'"@"', b"[" + items + b"]")


SHAPES = {
    # The issue's: 48x.
    "nested-900-under-an-unknown-key": (lambda: _under_a_key_nobody_reads(b"[" * 900 + b"]" * 900), "refused"),
    # The worst before (25x, as documented): refused now, each {} pays for no object.
    "empty-objects-as-entries": (lambda: body(doc(file_entry(), "@")).replace(b'"@"', b",".join([b"{}"] * (SIZE // 3))),
                                 "refused"),
    # The worst read now: short strings in the smallest lists the size pays for.
    "two-string-lists": (lambda: _under_a_key_nobody_reads(b'["ab","cd"]', LIST_BYTES), "read"),
}

_CHILD = """
import json, sys
from artifactkit import ArtifactkitError, Store

def peak_kib():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0])

url, op, work = sys.argv[1:4]
store = Store(url)
store.download("demo", work + "/warm", version=1)  # every import and the restore's machinery, before the peak
store.manifest(store.list()[0])
before = peak_kib()
try:
    if op == "verify":
        outcome = "; ".join(store.verify().unreadable) or "read"
    else:
        store.download("demo", work + "/out", version=2)
        outcome = "read"
except ArtifactkitError as err:
    outcome = type(err).__name__ + ": " + str(err)
print(json.dumps({"kib": peak_kib() - before, "outcome": outcome[:300]}))
"""


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Store:
    """A store (local or bucket) whose ``demo@1`` is one file; ``work/`` for destinations."""
    store = store_of_kind(request.param, request, fast_tmp)
    put_blob(store, SHA, DATA)
    forge_manifest(store, "demo", 1, body(doc()))
    (fast_tmp / "work").mkdir()
    return store


@pytest.mark.parametrize("op", ["verify", "download"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_forged_manifest_costs_at_most_the_stated_factor_of_its_size(store: Store, fast_tmp: Path, shape: str,
                                                                      op: str) -> None:
    make, expected = SHAPES[shape]
    data = make()
    assert len(data) >= SIZE // 2
    forge_manifest(store, "demo", 2, data)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(store.root), op, str(fast_tmp / "work")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    if expected == "refused":
        assert "more lists and objects than" in found["outcome"], found
    else:
        assert found["outcome"] == "read", found
    factor = found["kib"] * 1024 / len(data)
    assert factor <= MAX_DECODED_FACTOR, f"{shape} cost {op} {factor:.1f} times its size"

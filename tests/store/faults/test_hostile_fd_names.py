"""A call on an fd that fails names the entry, never the fd: ``fd 12: Invalid argument`` said nothing.

A manifest may claim an xattr the kernel refuses to set (a forged ``security.capability``: ``EINVAL``). The
download fails — rightly — but the calls that failed ran on an open fd (a file, a directory) or through
``/proc/self/fd/N/name`` (a FIFO, a symlink), and the error named that. Now it is the same ``OSError``
(errno kept) naming the entry's path in the tree, on both engines and both kinds of store, and nothing
appears at the destination.
"""

from __future__ import annotations

import base64
import errno
import json
import os
from pathlib import Path

import pytest

from artifactkit.cli.main import main
from tests.support.capability import require_real_root
from tests.support.hostile_store import STORE_KINDS, forge_manifest, manifest_doc, store_of_kind

ENTRIES = ("f", "d", "p", "l", ".")  # a file, a directory, a FIFO, a symlink, the tree's root


# A bucket store restores through the very same code: one kind of entry shows it takes the same path.
@pytest.mark.parametrize(("kind", "entry"), [*((STORE_KINDS[0], entry) for entry in ENTRIES), (STORE_KINDS[1], "f")])
def test_an_xattr_the_kernel_refuses_names_the_entry_not_an_fd(
        kind: str, entry: str, request: pytest.FixtureRequest, fast_tmp: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    require_real_root("set security.capability (a non-root download is refused the xattr by name already)")
    store = store_of_kind(kind, request, fast_tmp)
    src = fast_tmp / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    (src / "d").mkdir()
    os.mkfifo(src / "p")
    os.symlink("f", src / "l")
    doc = manifest_doc(store, store.publish(src, "demo"))
    for line in doc["entries"]:
        if line["path"] == entry:
            line["xattrs"] = [["security.capability", base64.b64encode(b"not a capability").decode()]]
    forge_manifest(store, "demo", 2, json.dumps(doc).encode())
    with pytest.raises(OSError) as caught:
        store.download("demo", fast_tmp / "out")
    assert (caught.value.errno, caught.value.filename) == (errno.EINVAL, entry), repr(caught.value)
    capsys.readouterr()
    assert main(["download", "demo", str(fast_tmp / "out"), "--store", str(store.root)]) == 2
    assert capsys.readouterr().err == f"artifactkit: error: {entry}: setxattr: Invalid argument\n"
    assert not (fast_tmp / "out").exists()

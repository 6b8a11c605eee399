"""The same corrupt blob is named with the same digest by ``verify`` and by ``download`` (issue 26): whichever
way the download copies it (in memory, streamed while hashed, sparse), it hashes every byte, as verify does."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.errors import IntegrityError

MIB = 1 << 20


def _sparse(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.write(b"head" * 1024)
        handle.seek(4 * MIB)
        handle.write(b"tail" * 1024)


@pytest.mark.parametrize(("name", "make"), [
    ("small", lambda path: path.write_bytes(b"a small file\n" * 100)),
    ("large", lambda path: path.write_bytes(os.urandom(9 * MIB))),  # over content.IN_MEMORY_LIMIT: streamed
    ("sparse", _sparse),
])
def test_verify_and_download_name_the_same_digest_for_a_corrupt_blob(fast_tmp: Path, name: str, make: object) -> None:
    src = fast_tmp / "src"
    src.mkdir()
    make(src / name)  # type: ignore[operator]
    store = Store(fast_tmp / "store")
    ref = store.publish(src, "demo")
    (entry,) = store.manifest(ref).files()
    assert entry.sha256 is not None
    blob = Path(store.layout.blobs_dir, entry.sha256)
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as handle:  # the last byte flipped: a prefix would still hash right
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 1]))
    (problem,) = store.verify().corrupt
    verified = re.search(r"content hashes to ([0-9a-f]{64})", problem)
    assert verified is not None, problem
    with pytest.raises(IntegrityError) as caught:
        store.download(ref, fast_tmp / "out")
    assert caught.value.actual == verified[1], (caught.value, problem)  # type: ignore[attr-defined]
    assert verified[1] in str(caught.value)

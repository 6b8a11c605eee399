"""The benchmark's corpora: deterministic content, historical ns times, built with
``artifactkit.conformance.corpus`` (so a tree is the same bytes and times on every machine).

``small`` 128 x 16 KiB in 4 dirs, ``many`` 10,000 x 1 KiB in 100 dirs, ``large`` one 256 MiB file; ``scale``
(issue 28) 100,000 x 256 B in 1,000 dirs of 100, published and downloaded by whole CLI processes.
"""

from __future__ import annotations

import os
from typing import Any, Final

from bench_env import CORPUS_TIMES, MIB

#: name -> (files, bytes per file, directories)
CORPORA: Final = {"small": (128, 16 << 10, 4), "many": (10_000, 1 << 10, 100), "large": (1, 256 << 20, 0)}
#: ``--quick``: the same shapes, small enough for a smoke run of seconds.
QUICK_CORPORA: Final = {"small": (32, 16 << 10, 4), "many": (500, 1 << 10, 10), "large": (1, 16 << 20, 0)}
SCALE_FILES: Final = 100_000
SCALE_FILES_QUICK: Final = 2_000
SCALE_BYTES: Final = 256
SCALE_PER_DIR: Final = 100


def scale_shape(files: int) -> tuple[int, int, int]:
    """``files`` x 256 B in directories of 100 (the issue's 1,000 dirs x 100 for 100,000 files)."""
    return files, SCALE_BYTES, max(1, files // SCALE_PER_DIR)


def build_corpus(dest: str, name: str, files: int, size: int, dirs: int) -> None:
    from artifactkit.conformance.corpus import content, materialize, parse_tree  # noqa: PLC0415
    from artifactkit.metadata.times import set_times_exact  # noqa: PLC0415

    times = dict(CORPUS_TIMES)
    if size > 64 * MIB:
        # corpus.content() is random.randbytes, which cannot make 256 MiB at once (a C int of bits):
        # the same deterministic bytes, 1 MiB per seed, and times set and read back exactly.
        os.mkdir(dest, 0o755)
        path = os.path.join(dest, "f00000.bin")
        with open(path, "wb") as handle:
            for chunk in range(size // MIB):
                handle.write(content(1000 + chunk, MIB))
        set_times_exact(path, **times)
        set_times_exact(dest, **times)
        return
    entries: list[dict[str, Any]] = [{"path": ".", "kind": "dir", "mode": 0o755, **times}]
    entries += [{"path": f"d{g:03d}", "kind": "dir", "mode": 0o755, **times} for g in range(dirs)]
    pattern = "d{group:03d}/f{i:05d}.bin" if dirs else "f{i:05d}.bin"
    generate = {"count": files, "per_dir": max(1, files // max(dirs, 1)), "pattern": pattern, "mode": 0o644,
                "size": size, "seed": 1000, "step_ns": 1_000_003, **times}
    materialize(parse_tree(f"bench-{name}", {"entry": entries, "generate": [generate]}), dest)

"""Publish and download of one sparse file (1 GiB apparent, 4 KiB of data), against sha256's own floor.

    python3 diagnostics/bench_sparse.py [--rounds 5]

The digest is the sha256 of the logical bytes (holes read as zeros), so hashing 1 GiB of zeros is a floor
no sparse-aware copy can go under; this prints that floor next to the medians.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time

from bench_env import scratch_on_tmpfs

from artifactkit import Store

GIB = 1 << 30


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with scratch_on_tmpfs() as root:
        src = os.path.join(root, "src")
        os.mkdir(src)
        with open(os.path.join(src, "big"), "wb") as handle:
            handle.truncate(GIB)
            handle.seek(GIB // 2)
            handle.write(b"d" * 4096)
        publish, download = [], []
        for index in range(args.rounds):
            store = Store(os.path.join(root, f"s{index}"))
            t0 = time.perf_counter()
            ref = store.publish(src, "sparse")
            t1 = time.perf_counter()
            store.download(ref, os.path.join(root, f"o{index}"))
            publish.append(t1 - t0)
            download.append(time.perf_counter() - t1)
            blocks = os.stat(os.path.join(root, f"o{index}", "big")).st_blocks
            shutil.rmtree(os.path.join(root, f"s{index}"))
            shutil.rmtree(os.path.join(root, f"o{index}"))
        zeros, digest = bytes(1 << 20), hashlib.sha256()
        t0 = time.perf_counter()
        for _ in range(1024):
            digest.update(zeros)
        floor = time.perf_counter() - t0
        print(f"publish median {statistics.median(publish):.3f} s, download median {statistics.median(download):.3f} s "
              f"({args.rounds} rounds); sha256 of 1 GiB of zeros {floor:.3f} s; output allocation {blocks * 512} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

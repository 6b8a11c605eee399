"""What the bounded, paged listing of a bucket costs against obstore's own stream (docs/s3.md, "The client").

``python3 diagnostics/bench_s3_listing.py [--keys N] [--rounds R]``: a loopback ``weed mini``, N objects of one
byte under ``p/blobs/`` (random 64-hex names, as blobs are), then R rounds alternating which goes first: every
key listed by ``obstore.list`` (chunks of 1,000: what ``Bucket.objects_under`` ran before it was bounded) and by
``Bucket.objects_under`` (a signed GET per page of 1,000, each page parsed and checked). Reported per side:
wall time and client CPU (``time.process_time``: every thread of this process, obstore's runtime too), median
(min-max). The server shares the machine, so its load shows in the wall times, not in the CPU ones.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import obstore

from artifactkit.store.s3.objects import Bucket
from tests.support.seaweedfs import running_seaweedfs


def _timed(run: Callable[[], int], keys: int) -> tuple[float, float]:
    wall, cpu = time.monotonic(), time.process_time()
    listed = run()
    if listed != keys:
        raise SystemExit(f"listed {listed} keys, not {keys}")
    return time.monotonic() - wall, time.process_time() - cpu


def _show(name: str, samples: list[tuple[float, float]]) -> str:
    walls, cpus = sorted(s[0] * 1000 for s in samples), sorted(s[1] * 1000 for s in samples)
    return (f"{name}: wall {statistics.median(walls):.0f} ms ({walls[0]:.0f}-{walls[-1]:.0f}), client CPU "
            f"{statistics.median(cpus):.0f} ms ({cpus[0]:.0f}-{cpus[-1]:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-s3-listing-") as data, running_seaweedfs(data) as endpoint:
        os.environ.update(endpoint.env())  # read by the Bucket's connection, made below
        bucket = Bucket(endpoint.bucket, "p/")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda key: bucket.put(key, b"x"),
                          (f"blobs/{secrets.token_hex(32)}" for _ in range(args.keys))))
        sides: dict[str, Callable[[], int]] = {
            "obstore.list": lambda: sum(len(page) for page in obstore.list(bucket.store, "p/blobs", chunk_size=1000)),
            "objects_under": lambda: sum(1 for _ in bucket.objects_under("blobs/"))}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for round_ in range(args.rounds):
            for name in sorted(sides, reverse=bool(round_ % 2)):
                samples[name].append(_timed(sides[name], args.keys))
        print(f"{args.keys:,} keys, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
        for name, found in samples.items():
            print(_show(name, found))


if __name__ == "__main__":
    main()

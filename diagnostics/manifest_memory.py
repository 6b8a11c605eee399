"""What a manifest costs its reader, per shape (issue 48): the peak RSS of whole ``artifactkit verify`` and
``artifactkit download`` processes on a store holding one forged manifest of ``--mib`` MiB, on both engines,
in times the manifest's size.

    python3 diagnostics/manifest_memory.py [--mib 16] [--shapes a,b] [--output FILE.json]

Each shape is the worst of its kind that ``manifest.limits`` lets through, or the one it refuses (the issue's
``[[[...]]]`` 900 deep under a key nobody reads was 48 times its size): a dense one is padded with spaces to
exactly the bytes its lists and objects must pay for (``LIST_BYTES``, ``OBJECT_BYTES``). Each run is the
console script under GNU ``time``, whose ``%M`` is the child's own peak (``ru_maxrss`` of a child of this
parent would start at the parent's); the factor is (peak - the same command's peak on the store without the
forged version) / the manifest's size. The outcome (exit code, the first line of stderr) shows whether the
shape was read or refused. Valid shapes point every file at one stored blob, so a download gets past its parse.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, Final

from bench_env import child_env, command_line, environment, scratch_on_tmpfs

from artifactkit import Store
from artifactkit.manifest.limits import LIST_BYTES, MAX_EXTENTS, OBJECT_BYTES

ENGINES: Final = ("python", "native")
OPS: Final = ("verify", "download")
T: Final = 1_600_000_000_000_000_000
EMPTY: Final = hashlib.sha256(b"").hexdigest()
HEAD: Final = (b'"format": "artifactkit.manifest/2", "name": "demo", "source_read_noatime": true, "entries": '
               b'[{"path": ".", "kind": "dir", "mode": 493, "mtime_ns": 1, "atime_ns": 1}')


def _repeat(unit: bytes, size: int, lists: int = 0, objects: int = 0) -> bytes:
    """``unit`` comma-separated to ``size`` bytes, each padded with spaces to what its lists and objects cost."""
    unit = unit.ljust(LIST_BYTES * lists + OBJECT_BYTES * objects - 1)
    return b",".join([unit] * (size // (len(unit) + 1)))


def under_top_key(unit: bytes, lists: int = 0, objects: int = 0) -> Callable[[int], bytes]:
    """``{"x": [unit, unit, ...], ...}``: a key nobody reads holding the bulk."""
    return lambda size: b'{"x": [' + _repeat(unit, size, lists, objects) + b"], " + HEAD + b"]}"


def under_entry_key(unit: bytes, lists: int = 0, objects: int = 0) -> Callable[[int], bytes]:
    """A directory entry whose unknown key ``x`` holds the bulk."""
    return lambda size: (b"{" + HEAD + b', {"path": "a", "kind": "dir", "mode": 493, "mtime_ns": 1, "atime_ns": 1, '
                         b'"x": [' + _repeat(unit, size, lists, objects) + b"]}]}")


def as_entries(unit: bytes, lists: int = 0, objects: int = 0) -> Callable[[int], bytes]:
    return lambda size: b"{" + HEAD + b", " + _repeat(unit, size, lists, objects) + b"]}"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _entries(size: int, line: Callable[[int], str]) -> bytes:
    lines, total, index = [], 0, 0
    while total < size:
        lines.append(line(index).encode())
        total, index = total + len(lines[-1]) + 2, index + 1
    return b"{" + HEAD + b",\n" + b",\n".join(lines) + b"]}"


def file_entries(size: int) -> bytes:
    """Usual file entries, as publish writes them, 100 to a directory (the directories listed too)."""
    dirs = [f'{{"atime_ns": {T}, "kind": "dir", "mode": 493, "mtime_ns": {T}, "path": "d{d}"}}' for d in range(
        size // 25_000 + 1)]
    files = _entries(size - sum(map(len, dirs)), lambda i: (
        f'{{"atime_ns": {T}, "gid": 0, "kind": "file", "mode": 420, "mtime_ns": {T}, "path": "d{i // 100}/f{i}", '
        f'"sha256": "{EMPTY}", "size": 0, "source_ctime_ns": {T}, "uid": 0}}'))
    return files[:-2] + b",\n" + ",\n".join(dirs).encode() + b"]}"


def small_entries(size: int) -> bytes:
    """The smallest valid entries: directories with one-character names."""
    return _entries(size, lambda i: f'{{"path": "{i:x}", "kind": "dir", "mode": 0, "mtime_ns": 0, "atime_ns": 0}}')


def xattr_entries(size: int) -> bytes:
    """Directories with 16 short xattrs each."""
    pairs = ", ".join(f'["user.{k:x}", "YQ=="]' for k in range(16))
    return _entries(size, lambda i: f'{{"path": "{i:x}", "kind": "dir", "mode": 0, "mtime_ns": 0, "atime_ns": 0, '
                                    f'"uid": 0, "gid": 0, "xattrs": [{pairs}]}}')


def extent_entries(size: int) -> bytes:
    """Sparse files of 4 KiB data runs every 8 KiB, as publish writes them, as many as fit (each at most
    ``MAX_EXTENTS`` runs)."""
    per_file = min(MAX_EXTENTS, size // 30)
    runs = ", ".join(f"[{8192 * k}, 4096]" for k in range(per_file))
    return _entries(size, lambda i: (
        f'{{"atime_ns": 1, "extents": [{runs}], "kind": "file", "mode": 420, "mtime_ns": 1, "path": "s{i}", '
        f'"sha256": "{EMPTY}", "size": {8192 * per_file}}}'))


def in_a_file_field(field: bytes, unit: bytes, lists: int = 0) -> Callable[[int], bytes]:
    """One file entry whose ``field`` (``extents``, ``xattrs``) lists ``unit``, repeated (the field is read)."""
    return lambda size: (b"{" + HEAD + b', {"path": "a", "kind": "file", "mode": 420, "mtime_ns": 1, "atime_ns": 1, '
                         b'"size": ' + str(size).encode() + b', "sha256": "' + EMPTY.encode() + b'", "uid": 0, '
                         b'"gid": 0, "' + field + b'": [' + _repeat(unit, size, lists) + b"]}]}")


def compact_runs(size: int) -> bytes:
    """One file whose data runs are ``[0,1],[2,1],...`` without spaces: valid, the densest a run can be."""
    runs = b",".join(b"[%d,1]" % (2 * k) for k in range(min(MAX_EXTENTS, size // 12)))
    return (b"{" + HEAD + b', {"path": "a", "kind": "file", "mode": 420, "mtime_ns": 1, "atime_ns": 1, "size": '
            + str(4 * MAX_EXTENTS).encode() + b', "sha256": "' + EMPTY.encode() + b'", "extents": [' + runs + b"]}]}")


#: Each shape: (what it is, its bytes of about the given size).
SHAPES: Final[dict[str, tuple[str, Callable[[int], bytes]]]] = {
    "nested-900-top-key": ("the issue's: [[[...]]] 900 deep, repeated, under a key nobody reads",
                           under_top_key(nested(900))),
    "nested-900-entry-key": ("[[[...]]] 900 deep, repeated, under an entry's unknown key",
                             under_entry_key(nested(900))),
    "empty-objects-as-entries": ("[{},{},...] as the entry list (25x before)", as_entries(b"{}")),
    "empty-lists": ("[[],[],...] under a key nobody reads", under_top_key(b"[]")),
    "objects-at-the-limit": ("{\"\":\"abcdefgh\"}, one per OBJECT_BYTES", under_top_key(b'{"":"abcdefgh"}', 0, 1)),
    "one-string-lists-at-the-limit": ("[\"abc\"], one per LIST_BYTES", under_top_key(b'["abc"]', 1)),
    "two-string-lists": ("[\"ab\",\"cd\"]: short strings in the smallest lists", under_top_key(b'["ab","cd"]', 1)),
    "three-string-lists": ("[\"ab\",\"cd\",\"ef\"]", under_top_key(b'["ab","cd","ef"]', 1)),
    "nested-3-at-the-limit": ("[[[]]], three lists per 3 x LIST_BYTES", under_top_key(b"[[[]]]", 3)),
    "short-strings": ("[\"ab\",\"ab\",...] under a key nobody reads", under_top_key(b'"ab"')),
    "tiny-keys": ("one object of distinct two-to-five-character keys",
                  lambda size: b'{"x": {' + b",".join(b'"%x":0' % i for i in range(size // 9)) + b"}, " + HEAD + b"]}"),
    "tiny-keys-string-values": ("one object of distinct short keys, each with a short string",
                                lambda size: b'{"x": {' + b",".join(b'"%x":"ab"' % i for i in range(size // 12))
                                + b"}, " + HEAD + b"]}"),
    "ints": ("[10000,10000,...]", under_top_key(b"10000")),
    "floats": ("[1e9,1e9,...]", under_top_key(b"1e9")),
    "long-string": ("one string of the whole size", lambda size: b'{"x": "' + b"a" * size + b'", ' + HEAD + b"]}"),
    "small-entries": ("the smallest valid entries (directories)", small_entries),
    "file-entries": ("usual file entries, as publish writes them", file_entries),
    "xattr-entries": ("directories with 16 xattrs each", xattr_entries),
    "extent-entries": ("sparse files with 4 KiB runs, as publish writes them", extent_entries),
    "compact-runs": ("one file's 2**20 runs [2k,1] without spaces (valid)", compact_runs),
    "runs-at-the-limit": ("one file's extents [0,1] repeated, one per LIST_BYTES (refused by its extents check)",
                          in_a_file_field(b"extents", b"[0,1]", 1)),
    "ints-in-runs": ("one file's extents as runs of 1,000 zeros each (refused by its extents check)",
                     in_a_file_field(b"extents", b"[" + b",".join([b"0"] * 1000) + b"]")),
    "xattr-pairs-at-the-limit": ("one file's xattrs [\"a.b\",\"\"] repeated, one per LIST_BYTES (refused by its "
                                 "xattrs check)", in_a_file_field(b"xattrs", b'["a.b",""]', 1)),
}


def _forge(store_dir: str, data: bytes) -> None:
    """``demo@2`` := ``data``, written as a writer of the store would (the layout is documented)."""
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(store_dir, "manifests", "demo", f"2.{digest}.json"), "wb") as handle:
        handle.write(data)


def _peak(cmd: list[str], engine: str, scratch: str) -> tuple[int, int, str]:
    """(peak RSS KiB, exit code, stderr's first line) of ``cmd`` on ``engine``."""
    rss = os.path.join(scratch, "rss")
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss, *cmd], env=child_env(engine),
                          capture_output=True, text=True, check=False)
    with open(rss, encoding="ascii") as handle:
        peak = int(handle.read().split()[-1])
    return peak, done.returncode, (done.stderr.strip().splitlines() or [""])[0][:200]


def _commands(store_dir: str, dest: str, version: int) -> dict[str, list[str]]:
    script = os.path.join(os.path.dirname(sys.executable), "artifactkit")
    cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "artifactkit.cli"]
    return {"verify": [*cli, "verify", "--store", store_dir],
            "download": [*cli, "download", "--store", store_dir, f"demo@{version}", dest]}


def measure(shape: str, size: int, scratch: str) -> dict[str, Any]:
    store_dir = os.path.join(scratch, shape)
    os.makedirs(os.path.join(scratch, "src"), exist_ok=True)
    open(os.path.join(scratch, "src", "empty"), "wb").close()
    Store(store_dir).publish(os.path.join(scratch, "src"), "demo")
    data = SHAPES[shape][1](size)
    runs: dict[str, Any] = {}
    for engine in ENGINES:
        for op in OPS:
            base, _, _ = _peak(_commands(store_dir, os.path.join(scratch, "out-base"), 1)[op], engine, scratch)
            subprocess.run(["rm", "-rf", os.path.join(scratch, "out-base")], check=True)
            _forge(store_dir, data)
            peak, code, first = _peak(_commands(store_dir, os.path.join(scratch, "out"), 2)[op], engine, scratch)
            subprocess.run(["rm", "-rf", os.path.join(scratch, "out")], check=True)
            os.unlink(os.path.join(store_dir, "manifests", "demo", f"2.{hashlib.sha256(data).hexdigest()}.json"))
            runs[f"{engine}/{op}"] = {"peak_kib": peak, "baseline_kib": base, "exit": code, "stderr": first,
                                      "factor": round((peak - base) * 1024 / len(data), 1)}
            print(f"{shape:30} {engine:6} {op:8} {runs[f'{engine}/{op}']['factor']:5.1f}x  exit {code}  {first[:90]}",
                  flush=True)
    subprocess.run(["rm", "-rf", store_dir], check=True)
    return {"what": SHAPES[shape][0], "bytes": len(data), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=float, default=16)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    shapes = args.shapes.split(",")
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    with scratch_on_tmpfs() as scratch:
        found = {shape: measure(shape, int(args.mib * (1 << 20)), scratch) for shape in shapes}
        env = environment(scratch, "a private directory on /dev/shm")
    worst = max(((shape, run, doc["runs"][run]["factor"]) for shape, doc in found.items() for run in doc["runs"]),
                key=lambda item: item[2])
    doc = {"schema": "artifactkit.manifest_memory/1", "command": command_line(sys.argv[1:] if argv is None else argv,
                                                                              "manifest_memory.py"),
           "environment": env, "mib": args.mib, "shapes": found,
           "worst": {"shape": worst[0], "run": worst[1], "factor": worst[2]}}
    print(f"worst: {worst[0]} ({worst[1]}): {worst[2]}x")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

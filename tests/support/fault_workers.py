"""Child-process code for the fault suite: importable by ``spawn`` and runnable as a script.

As a script (``python3 tests/fault_workers.py publish VARIANT STORE NAME SRC...``) it publishes
under ``strace`` for the durability test; ``VARIANT`` other than ``correct`` is a deliberately
broken store whose one reordered step the outside checker must catch. The concurrency roles
below run in ``spawn`` processes until a shared deadline and report what they did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import time
from collections.abc import Iterable
from typing import Any

from artifactkit._syscalls import syncfs
from artifactkit.conformance.corpus import TreeSpec, content, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.metadata.model import FileMeta
from artifactkit.store.local_backend import LocalBackend, LocalTxn
from artifactkit.store.store import Store

#: Touched (as a failing stat) right after publish returns: the "before publish returns" line in a trace.
RETURN_MARKER = "/nonexistent-artifactkit-publish-returned"


class RenameBeforeFlushTxn(LocalTxn):
    """Broken on purpose: blobs and manifest become visible first, and are flushed only afterwards."""

    def barrier(self) -> None:
        pass

    def claim(self, name: str, version: int, body: bytes, digest: str) -> bool:
        claimed = super().claim(name, version, body, digest)
        syncfs(self.dirs.root)
        return claimed


class NoManifestFsyncTxn(LocalTxn):
    """Broken on purpose: the manifest, written after the barrier, is renamed into place unflushed."""

    def sync_file(self, fd: int) -> None:
        pass


class NoNameDirFsyncTxn(LocalTxn):
    """Broken on purpose: the manifest's rename into ``manifests/<name>`` is never made durable."""

    def sync_dir(self, dir_fd: int) -> None:
        if dir_fd not in (self.dirs.blobs, self.dirs.manifests):
            return
        super().sync_dir(dir_fd)


class NoBlobsDirFsyncTxn(LocalTxn):
    """Broken on purpose: the blobs' renames into ``blobs/`` are never made durable."""

    def sync_dir(self, dir_fd: int) -> None:
        if dir_fd != self.dirs.blobs:
            super().sync_dir(dir_fd)


#: The deliberately broken stores of the durability test: each one's transaction leaves out one step.
BROKEN: dict[str, type[LocalTxn]] = {"rename-before-flush": RenameBeforeFlushTxn,
                                     "no-manifest-fsync": NoManifestFsyncTxn,
                                     "no-name-dir-fsync": NoNameDirFsyncTxn,
                                     "no-blobs-dir-fsync": NoBlobsDirFsyncTxn}


def publish_main(argv: list[str]) -> int:
    variant, root, name, *sources = argv
    if variant != "correct" and variant not in BROKEN:
        raise SystemExit(f"unknown variant {variant!r}")
    backend = LocalBackend(root)
    if variant in BROKEN:
        backend.txn_class = BROKEN[variant]
    store = Store(backend)
    for src in sources:
        store.publish(src, name)
        with contextlib.suppress(FileNotFoundError):
            os.stat(RETURN_MARKER)
    return 0


# -- concurrency roles (spawn) -------------------------------------------------------------------

ROLES = ("publish:shared", "publish:shared", "publish:solo", "download:any", "download:same", "download:same",
         "verify", "gc")


def fingerprint(entries: Iterable[FileMeta]) -> str:
    """One digest of everything a round trip must preserve, to compare across processes."""
    rows = sorted((e.path, e.kind, e.mode, e.size, e.mtime_ns, e.atime_ns, e.sha256 or "", e.target or "")
                  for e in entries)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _tree(index: int, step: int) -> TreeSpec:
    """A small tree: one file shared by every publisher (dedup races), one unique to this publish."""
    t0 = 1_600_000_000_000_000_000 + index * 1_000_003 + step * 7
    seeds = {"shared.bin": 1, f"own/{index}-{step}.bin": 1000 * index + step + 2}
    entries = [FileMeta(path=".", kind="dir", mode=0o755, mtime_ns=t0, atime_ns=t0 + 1),
               FileMeta(path="own", kind="dir", mode=0o750, mtime_ns=t0 + 2, atime_ns=t0 + 3)]
    for offset, (path, seed) in enumerate(seeds.items()):
        size = 3000 + seed % 5000
        entries.append(FileMeta(path=path, kind="file", mode=0o644, size=size, mtime_ns=t0 + 10 + offset,
                                atime_ns=t0 + 20 + offset, sha256=hashlib.sha256(content(seed, size)).hexdigest()))
    return TreeSpec(f"c{index}", "concurrency tree", tuple(entries), seeds)


def run_role(role: str, *, index: int, store_root: str, work: str, duration_ns: int, max_ops: int) -> None:
    """Run ``role`` until the deadline (or ``max_ops``); write what happened to ``work/result-<index>.json``."""
    store = Store(store_root)
    deadline = time.monotonic_ns() + duration_ns
    rng = random.Random(index)
    done: dict[str, Any] = {"role": role, "index": index, "ops": 0, "errors": [], "published": [],
                            "downloaded": [], "gc_removed": [], "planted": []}
    for step in range(max_ops):
        if time.monotonic_ns() >= deadline:
            break
        try:
            _one_op(role, index=index, step=step, store=store, scratch=os.path.join(work, f"w{index}-{step}"),
                    rng=rng, done=done)
        except Exception as err:  # noqa: BLE001 - every failure is a finding to report, not a crash
            done["errors"].append(f"{role}#{index} step {step}: {type(err).__name__}: {err}")
    with open(os.path.join(work, f"result-{index}.json"), "w", encoding="utf-8") as handle:
        json.dump(done, handle)


def _one_op(role: str, *, index: int, step: int, store: Store, scratch: str, rng: random.Random,
            done: dict[str, Any]) -> None:
    kind, _, arg = role.partition(":")
    if kind != "publish" and not os.path.isdir(store.layout.manifests_dir):
        return  # no publisher has made the store yet: it is not a store (NotAStoreError) until then
    if kind == "publish":
        supplied = materialize(_tree(index, step), scratch)
        ref = store.publish(scratch, "shared" if arg == "shared" else f"solo-{index}")
        done["published"].append([ref.name, ref.version, ref.digest, fingerprint(supplied)])
        shutil.rmtree(scratch)
    elif kind == "download":
        refs = store.list()
        if arg == "same":
            refs = [r for r in refs if (r.name, r.version) == ("shared", 1)]
        if not refs:
            return
        ref = rng.choice(refs)
        store.download(ref, scratch)
        done["downloaded"].append([ref.name, ref.version, ref.digest, fingerprint(capture_tree(scratch))])
        shutil.rmtree(scratch)
    elif kind == "verify":
        report = store.verify()
        if not report.ok:
            done["errors"].append(f"verify not ok: {report.corrupt + report.missing + report.unreadable}")
    else:
        # Crash debris for gc to find: it must remove exactly these, never a blob a version needs.
        if not os.path.isdir(store.layout.staging_dir):
            return  # the first publisher is still making the layout
        data = f"debris {index}-{step}".encode()
        sha = hashlib.sha256(data).hexdigest()
        with open(os.path.join(store.layout.blobs_dir, sha), "wb") as handle:
            handle.write(data)
        os.mkdir(os.path.join(store.layout.staging_dir, f"publish-0-{step:016x}"))
        done["planted"] += [sha, f"publish-0-{step:016x}"]
        removed = store.gc()
        done["gc_removed"] += removed.removed_blobs + removed.removed_staging
    done["ops"] += 1


def run_concurrency(store_root: str, work: str, *, duration_s: float, max_ops: int = 100_000) -> dict[str, Any]:
    """Run the eight roles as ``spawn`` processes against one store, then check everything they saw."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=run_role, args=(role,), kwargs={
        "index": index, "store_root": store_root, "work": work, "duration_ns": int(duration_s * 1e9),
        "max_ops": max_ops}) for index, role in enumerate(ROLES)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=duration_s + 120)  # bounded: a wedged worker fails the run, it never hangs it
    hung = [p.pid for p in processes if p.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    results = []
    for index in range(len(ROLES)):
        path = os.path.join(work, f"result-{index}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                results.append(json.load(handle))
    return summarize(Store(store_root), results, hung=hung, expected_workers=len(ROLES), work=work)


def summarize(store: Store, results: list[dict[str, Any]], *, hung: list[int | None], expected_workers: int,
              work: str) -> dict[str, Any]:
    """Totals by kind and every invariant: nothing lost, duplicated or corrupt; gc took only debris."""
    totals: dict[str, int] = {}
    errors = [error for r in results for error in r["errors"]]
    if hung or len(results) != expected_workers:
        errors.append(f"workers hung {hung} or did not report ({len(results)} of {expected_workers})")
    published: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for result in results:
        kind = result["role"].replace(":any", "").replace(":solo", "").replace(":shared", "")
        totals[kind] = totals.get(kind, 0) + result["ops"]
        for name, version, digest, print_ in result["published"]:
            published.setdefault((name, version), []).append((digest, print_))
    listed = {(ref.name, ref.version): ref for ref in store.list()}
    duplicated = sorted(f"{n}@{v}" for (n, v), got in published.items() if len(got) > 1)
    lost = sorted(f"{n}@{v}" for (n, v) in published if (n, v) not in listed)
    unexplained = sorted(f"{n}@{v}" for (n, v) in listed if (n, v) not in published)
    corrupt = []
    for result in results:
        for name, version, digest, print_ in result["downloaded"]:
            want = published.get((name, version), [("", "")])[0]
            if (digest, print_) != want:
                corrupt.append(f"download of {name}@{version} by worker {result['index']} differs")
    for (name, version), got in sorted(published.items()):
        ref = listed.get((name, version))
        if ref is None:
            continue
        dest = os.path.join(work, f"final-{name}-{version}")
        store.download(ref, dest)
        if (ref.digest, fingerprint(capture_tree(dest))) != got[0]:
            corrupt.append(f"{name}@{version} does not download as published")
        shutil.rmtree(dest)
    planted = {item for r in results for item in r["planted"]}
    gc_took_needed = sorted({item for r in results for item in r["gc_removed"]} - planted)
    report = store.verify()
    same = sum(len(r["downloaded"]) for r in results if r["role"] == "download:same")
    return {"totals": totals, "same_version_downloads": same, "versions": len(listed),
            "error_count": len(errors), "errors": errors[:20], "lost": lost, "duplicated": duplicated,
            "unexplained": unexplained,
            "corrupt": corrupt, "gc_removed_needed": gc_took_needed, "final_verify_ok": report.ok}


if __name__ == "__main__":
    if sys.argv[1] == "publish":
        sys.exit(publish_main(sys.argv[2:]))
    raise SystemExit(f"unknown command {sys.argv[1]!r}")

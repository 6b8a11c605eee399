"""One measured operation, in a fresh process: ``python3 benches/child.py TASK_JSON`` (a file, never ``-m``: see
``rounds.CHILD``).

The parent (``rounds.py``) starts this under ``taskset`` with ``ARTIFACTKIT_ENGINE`` set for the
engine it measures. Everything the operation needs is imported before the clock starts (the store, the
engine's executor, the native core), so the clock runs around the operation alone: the library call, or
``subprocess.run`` for ``cp``/``rsync`` (their fork+exec is part of what a user pays). Printed: one JSON
object with the wall time, the CPU time split into user and system (this process's threads and the tools
it ran), the peak RSS, the engine the library says it uses, the manifest digest of a publish, and for the
native engine the wall time spent inside each of the core's functions (those taking ``threads``: the part
its threads share).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

EXTERNAL: Final = frozenset({"cp_a", "rsync", "calls_publish", "calls_download"})
AK_OPS: Final = frozenset({"publish", "download", "roundtrip"})


def _sha256_tree(root: str) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as handle:
                hashlib.file_digest(handle, "sha256")


def _tool(cmd: list[str], rss_file: str | None, *, quiet: bool = False) -> None:
    # GNU time's own process is tiny and fresh, so the %M it reports is the tool's peak alone.
    prefix = ["/usr/bin/time", "-f", "%M", "-o", rss_file] if rss_file else []
    subprocess.run([*prefix, *cmd], check=True, stdout=subprocess.DEVNULL if quiet else None)


def _operate(task: dict[str, Any], rss_file: str | None) -> str | None:
    """Run the operation; the manifest digest of a publish (None for anything else)."""
    from artifactkit.store.store import Store  # noqa: PLC0415 - imported before the clock (see main)

    op, src, dest, store, workers = task["op"], task["src"], task["dest"], task["store"], task.get("workers")
    if op == "publish":
        return Store(store).publish(src, "bench", workers=workers).digest
    if op == "download":
        Store(store).download("bench@1", dest, workers=workers)
    elif op == "roundtrip":
        ref = Store(store).publish(src, "bench", workers=workers)
        Store(store).download(ref, dest, workers=workers)
        return ref.digest
    elif op == "cp_a":
        _tool(["cp", "-a", src, dest], rss_file)
    elif op == "rsync":
        _tool(["rsync", "-a", "--atimes", src + "/", dest + "/"], rss_file)
    elif op in ("calls_publish", "calls_download"):
        # kernel_bound.c: the engine's system calls alone, on a thread per CPU (kernel_bound.py says why).
        mix, work = ("publish", dest) if op == "calls_publish" else ("download", task["calls_seed"])
        if mix == "publish":
            os.mkdir(dest)
        _tool([task["kernel_bound"], mix, src, work, str(task["calls_workers"]), "threads"], rss_file, quiet=True)
    elif op == "copytree":
        shutil.copytree(src, dest, symlinks=True)
    elif op == "sha256":
        _sha256_tree(src)
    elif op != "noop":
        raise ValueError(f"unknown operation {op!r}")
    return None


def time_the_core(core: ModuleType) -> dict[str, dict[str, Any]]:
    """Wrap every function of ``core`` (``artifactkit._native``) with a clock: per function, the wall time inside it and
    its calls, and whether it runs on threads (its signature takes ``threads``, as PyO3 records it in
    ``__text_signature__``). The rest of the operation is this process's one Python thread.

    Generic on purpose: whatever moves into the core later (a scan, the manifest) is counted without changing
    this script, and a single-threaded core function is not mistaken for parallel work. The library calls
    the core as ``_native.name(...)``, so the wrapper is what it calls; ``calls`` shows it (a core reached
    another way would count 0). Two clock reads per call.
    """
    spent: dict[str, dict[str, Any]] = {}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        signature = getattr(function, "__text_signature__", None) or ""
        mine = spent[name] = {"ns": 0, "calls": 0, "threaded": "threads" in signature.strip("()").split(", ")}

        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                mine["ns"] += time.perf_counter_ns() - start
                mine["calls"] += 1
        return call

    for name in dir(core):
        value = getattr(core, name)
        if callable(value) and not isinstance(value, type):  # functions, not NativeFailure
            setattr(core, name, timed(name, value))
    return spent


def _profile_top(profile: Any, limit: int = 15) -> list[dict[str, Any]]:
    import pstats  # noqa: PLC0415 - only the profiling child needs it

    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{os.path.basename(filename)}:{line}({func})", "calls": calls,
                     "tottime_ms": round(tottime * 1e3, 2), "cumtime_ms": round(cumtime * 1e3, 2)})
    return sorted(rows, key=lambda row: -row["tottime_ms"])[:limit]


def _vm_hwm_kib() -> int:
    # VmHWM belongs to this process's own address space, which exec made fresh. ru_maxrss does not:
    # Linux carries the forking process's high-water mark across fork+exec into the child's.
    with open("/proc/self/status", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith("VmHWM:")).split()[1])


def _cpu_s() -> tuple[float, float]:
    # (user, system) of this process (all its threads) and of the tools it ran and waited for: the CPU the
    # op used, which other load on a shared machine inflates far less than the wall clock. getrusage
    # counts in microseconds (os.times() in 10 ms clock ticks: too coarse for `small`).
    own, tools = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + tools.ru_utime, own.ru_stime + tools.ru_stime


def measure(task: dict[str, Any]) -> dict[str, Any]:
    import artifactkit.store.store  # noqa: F401, PLC0415 - the import stays off the clock
    from artifactkit.engine.select import engine_name, native_available  # noqa: PLC0415

    engine = engine_name()  # what the library itself says it will use, under this child's environment
    if engine == "native" and not native_available():  # imports the executor and the core, off the clock
        raise SystemExit("ARTIFACTKIT_ENGINE=native but the native core does not import")
    core = None
    if engine == "native" and task["op"] in AK_OPS:
        from artifactkit import _native  # noqa: PLC0415 - only the native engine's children

        core = time_the_core(_native)
    base_rss = _vm_hwm_kib()  # interpreter + imports: the high-water mark before the op
    external = task["op"] in EXTERNAL
    rss_file = task["dest"] + ".rss" if external and task.get("measure_rss") else None
    profile = None
    if task.get("profile"):
        import cProfile  # noqa: PLC0415

        profile = cProfile.Profile()
        profile.enable()
    user0, sys0 = _cpu_s()
    start = time.perf_counter_ns()
    digest = _operate(task, rss_file)
    elapsed = time.perf_counter_ns() - start
    user1, sys1 = _cpu_s()
    if profile is not None:
        profile.disable()
    peak: int | None = _vm_hwm_kib()
    if external:  # cp/rsync: their own peak, known only from a GNU time run
        peak = None
        if rss_file:
            with open(rss_file, encoding="ascii") as handle:
                peak = int(handle.read().split()[-1])
            os.unlink(rss_file)
    result: dict[str, Any] = {
        "ns": elapsed, "user_ns": int((user1 - user0) * 1e9), "sys_ns": int((sys1 - sys0) * 1e9),
        "peak_rss_kib": peak, "base_rss_kib": base_rss, "engine": engine, "digest": digest}
    result["cpu_ns"] = result["user_ns"] + result["sys_ns"]
    if core is not None:
        called = {name: got for name, got in core.items() if got["calls"]}
        result["core"] = called
        result["core_ns"] = sum(got["ns"] for got in called.values())
        result["threaded_ns"] = sum(got["ns"] for got in called.values() if got["threaded"])
    if profile is not None:
        result["profile"] = _profile_top(profile)
    return result


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
    sys.exit(0)

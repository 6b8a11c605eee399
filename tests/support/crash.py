"""Kill-point harness: run one store operation in a child process and SIGKILL it at an exact point.

The child (this file run as a script) wraps the syscalls that change the store -- ``os.write``,
``os.fsync``, ``syncfs``, every rename, ``mkdir``/``unlink``/``rmdir``/``symlink``, ``chmod`` and
``utime`` -- by replacing them *in the child only*, counts every call, and SIGKILLs itself right
after call N returns. Nothing in the store knows about it, so the code under test is the code
that ships. A dry run records the sequence of points (with store-relative, token-masked labels)
so a caller can aim at every rename/fsync point; random-time kills come from the parent instead.

After each kill :func:`check_trial` proves what the issue asks: ``verify`` is ok (leftovers only
where ``gc`` may remove them), every listed version is one we published and downloads byte- and
ns-exact, no version is half-visible, a download destination is absent or complete, and ``gc``
then leaves a clean store. Shared by ``tests/test_faults_crash.py`` and the campaign.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

import artifactkit.store.download as restore_module
import artifactkit.store.layout as layout_module
import artifactkit.store.local_backend as store_module
from artifactkit import ArtifactkitError, FileMeta, Store, assert_metadata_equal
from artifactkit.conformance.corpus import TreeSpec, content, load_tree, materialize
from artifactkit.engine.reference.scan import capture_tree

SCENARIOS = ("publish", "download", "gc")
#: Points whose order carries the durability argument: every one of them is a kill target.
ORDERING_KINDS = ("rename", "fsync", "syncfs")
#: A trial never needs this long; the bound only keeps a wedged child from hanging the suite.
CHILD_TIMEOUT_S = 60

# -- child side --------------------------------------------------------------------------------

_MASKS = (
    (re.compile(r"[0-9a-f]{64}"), "<sha>"),
    (re.compile(r"publish-\d+-[0-9a-f]{16}"), "publish-<txn>"),
    (re.compile(r"artifactkit-[0-9a-f]{12}"), "artifactkit-<tmp>"),
)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd{fd}"


def _label(work: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Where a call acted, relative to the trial dir, with digests and random tokens masked."""
    first = args[0] if args else ""
    if isinstance(first, int):
        where = _fd_path(first)
    else:
        where = os.fsdecode(first)
        dir_fd = kwargs.get("dir_fd", kwargs.get("src_dir_fd"))
        if isinstance(dir_fd, int):
            where = os.path.join(_fd_path(dir_fd), where)
    if len(args) > 1 and isinstance(args[1], str | bytes) and not isinstance(first, int):
        target = os.fsdecode(args[1])
        dst_fd = kwargs.get("dst_dir_fd")
        if isinstance(dst_fd, int):
            target = os.path.join(_fd_path(dst_fd), target)
        where = f"{where} -> {target}"
    where = where.replace(work + "/", "")
    for pattern, mask in _MASKS:
        where = pattern.sub(mask, where)
    return where


def _native_engine() -> Any:
    """The native engine's module, or ``None`` where the core is not built (os.rename is then the only one)."""
    try:
        return importlib.import_module("artifactkit.engine.native")
    except ImportError:
        return None


def _call_label(work: str, attr: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if attr == "symlink":  # symlink(target, name): label the new name first, as for every other call
        return _label(work, (args[1], args[0], *args[2:]), kwargs)
    if attr == "rename_files":  # rename_files(moves, src_dir_fd=, dst_dir_fd=): the first move names it
        moves = args[0]
        first = _label(work, moves[0], kwargs) if moves else "(nothing)"
        return f"{first} and {len(moves) - 1} more" if len(moves) > 1 else first
    return _label(work, args, kwargs)


def _install_kill_points(work: str, kill_after: int | None, trace: list[str] | None) -> None:
    """Wrap every store-changing call in this process; SIGKILL after call ``kill_after``."""
    count = 0

    def wrap(owner: Any, attr: str, kind: str) -> None:
        real: Callable[..., Any] = getattr(owner, attr)

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            result = real(*args, **kwargs)
            count += 1
            if trace is not None:
                trace.append(f"{kind} {_call_label(work, attr, args, kwargs)}")
            if count == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(owner, attr, counted)

    if kill_after == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if (native := _native_engine()) is not None:
        # The native core's batch of renames (a publish's blobs into blobs/): one point, before and after all.
        wrap(native, "rename_files", "rename")
    for owner, attr, kind in (
        (os, "write", "write"), (os, "fsync", "fsync"), (store_module, "syncfs", "syncfs"),
        (layout_module, "rename_noreplace", "rename"), (restore_module, "rename_noreplace", "rename"),
        (os, "rename", "rename"), (os, "mkdir", "mkdir"), (os, "unlink", "unlink"), (os, "rmdir", "rmdir"),
        (os, "symlink", "symlink"), (os, "fchmod", "chmod"), (os, "chmod", "chmod"), (os, "utime", "utime"),
    ):
        wrap(owner, attr, kind)


def child_main(spec: dict[str, Any]) -> int:
    """Run one scenario's operation in this (child) process, as the parent's spec says."""
    work = spec["work"]
    store = Store(os.path.join(work, "store"))
    trace: list[str] | None = [] if spec.get("record") else None
    _install_kill_points(work, spec.get("kill_after"), trace)
    print("ready", flush=True)
    if spec.get("ready_wait"):
        sys.stdin.readline()  # the parent's clock for a random-time kill starts as it sends this line
    started = time.monotonic_ns()
    scenario = spec["scenario"]
    if scenario == "publish":
        store.publish(os.path.join(spec["base"], "src-demo2"), "demo")
        store.publish(os.path.join(spec["base"], "src-fresh"), "fresh")
    elif scenario == "download":
        store.download("demo@1", os.path.join(work, "out", "dest"))
    else:
        store.gc()
    print(f"done {time.monotonic_ns() - started}", flush=True)
    if trace is not None:
        Path(work, "trace.json").write_text(json.dumps(trace))
    return 0


# -- parent side -------------------------------------------------------------------------------


@attrs.frozen
class Materials:
    """Source trees, their supplied metadata, reference digests and one template store per scenario."""

    base: Path
    expected: dict[str, list[FileMeta]]  # "demo@1" -> supplied metadata
    digests: dict[str, str]  # "demo@1" -> manifest digest a correct publish produces


@attrs.frozen
class Trial:
    """One run of a child: where it was aimed, how it ended, and what the checks found."""

    scenario: str
    point: int | None  # kill after this many counted calls; None: killed by time or not at all
    label: str
    killed: bool
    problems: tuple[str, ...]
    download_leftovers: int


def _tree_specs() -> dict[str, TreeSpec]:
    basic = load_tree("basic")
    link = FileMeta(path="data/link", kind="symlink", mode=0o777, mtime_ns=1_600_000_000_000_000_321,
                    atime_ns=1_600_000_000_000_000_654, target="models/weights.bin")
    demo1 = TreeSpec("demo1", "basic plus a symlink", (*basic.entries, link), dict(basic.seeds))
    # demo2 shares most blobs with demo1 (the dedup path), changes one and adds one larger than the
    # in-memory limit (the streaming path): every way a blob reaches the store is killed somewhere.
    seeds = dict(basic.seeds, **{"README.txt": 101, "data/big.bin": 102})
    big = FileMeta(path="data/big.bin", kind="file", mode=0o640, size=(8 << 20) + 4097,
                   mtime_ns=1_700_000_000_000_000_001, atime_ns=1_700_000_000_000_000_002)
    entries = [*demo1.entries, big]
    entries = [attrs.evolve(e, sha256=hashlib.sha256(content(seeds[e.path], e.size)).hexdigest())
               if e.kind == "file" else e for e in entries]
    demo2 = TreeSpec("demo2", "demo1 with one changed and one streamed file", tuple(entries), seeds)
    return {"demo@1": demo1, "demo@2": demo2, "fresh@1": load_tree("links")}


def prepare(base: Path) -> Materials:
    """Build the sources, a reference store (for digests) and the template store of each scenario.

    ``base`` must be on a ``noatime`` filesystem: each publish reads the sources' symlinks, and a
    moving link atime would make every publish of the same tree a different manifest.
    """
    base.mkdir(exist_ok=True)
    specs = _tree_specs()
    expected = {}
    for ref, src in (("demo@1", "src-demo1"), ("demo@2", "src-demo2"), ("fresh@1", "src-fresh")):
        expected[ref] = materialize(specs[ref], base / src)
    reference = Store(base / "reference")
    digests = {"demo@1": reference.publish(base / "src-demo1", "demo").digest,
               "demo@2": reference.publish(base / "src-demo2", "demo").digest,
               "fresh@1": reference.publish(base / "src-fresh", "fresh").digest}
    for scenario in SCENARIOS:
        template = Store(base / f"template-{scenario}").publish(base / "src-demo1", "demo")
        if template.digest != digests["demo@1"]:
            # readlink moves a link's atime unless the filesystem is noatime: the sources would drift
            raise RuntimeError(f"publishing {base} twice gave two manifests: put it on a noatime filesystem")
    _plant_debris(Store(base / "template-gc"))
    return Materials(base=base, expected=expected, digests=digests)


def _plant_debris(store: Store) -> None:
    """What crashed publishes leave: unreferenced blobs and staging dirs with files (for gc to remove)."""
    for index in range(3):
        data = f"orphan {index}".encode()
        Path(store.layout.blobs_dir, hashlib.sha256(data).hexdigest()).write_bytes(data)
        txn = Path(store.layout.staging_dir, f"publish-1-{index:016x}")
        txn.mkdir()
        (txn / "blob-0").write_bytes(data * 10)
        (txn / "manifest.json").write_bytes(b"{")


def run_child(materials: Materials, scenario: str, work: Path, *, kill_after: int | None = None,
              delay_s: float | None = None, record: bool = False) -> tuple[bool, int]:
    """Copy the scenario's template store into ``work`` and run the child.

    Returns whether it was killed and how long the operation took (ns, ready to done; 0 if killed).
    """
    shutil.copytree(materials.base / f"template-{scenario}", work / "store", symlinks=True)
    (work / "out").mkdir()
    spec = {"scenario": scenario, "work": str(work), "base": str(materials.base), "kill_after": kill_after,
            "record": record, "ready_wait": delay_s is not None}
    with subprocess.Popen([sys.executable, __file__, json.dumps(spec)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        ready = proc.stdout.readline()
        if delay_s is not None and ready == "ready\n":
            proc.stdin.write("go\n")
            proc.stdin.flush()
            try:
                proc.wait(timeout=delay_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        done = proc.stdout.readline()
        took_ns = int(done.split()[1]) if done.startswith("done ") else 0
        _out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{scenario} child failed ({proc.returncode}), not killed: {err.strip()[-2000:]}")
    return proc.returncode == -signal.SIGKILL, took_ns


def record_points(materials: Materials, scenario: str, work: Path) -> tuple[list[str], int]:
    """The labelled sequence of counted calls an uninterrupted run makes, and its duration in ns."""
    work.mkdir()
    killed, took_ns = run_child(materials, scenario, work, record=True)
    if killed:
        raise RuntimeError(f"the recording run of {scenario} was killed")
    return list(json.loads((work / "trace.json").read_text())), took_ns


def snapshot(root: Path, *, times: bool = False) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: kind and mode, inode, size and content digest (or link target),
    and with ``times`` its mtime too — "nothing changed here" made checkable. The one tree snapshot
    the suite and the fault campaign share (directory times may move in a crash, so they are opt-in).
    """
    found: dict[str, tuple[object, ...]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            entry: tuple[object, ...] = (stat.filemode(st.st_mode), st.st_ino, st.st_size, digest)
            found[os.path.relpath(path, root)] = (*entry, st.st_mtime_ns) if times else entry
    return found


def check_trial(materials: Materials, scenario: str, work: Path) -> tuple[list[str], int]:
    """Every invariant after a kill; returns (problems, download leftovers next to the destination)."""
    problems: list[str] = []
    store = Store(work / "store")
    report = store.verify()
    if not report.ok or report.in_progress:
        problems.append(f"verify not ok after the kill: {attrs.asdict(report)}")
    stray = [item for item in report.orphaned if not item.startswith(("staging/", "blobs/"))]
    if stray:
        problems.append(f"leftovers gc cannot own: {stray}")
    listed = [str(ref) for ref in store.list()]
    allowed = {"publish": (["demo@1"], ["demo@1", "demo@2"], ["demo@1", "demo@2", "fresh@1"])}
    if listed not in allowed.get(scenario, (["demo@1"],)):
        problems.append(f"unexpected versions listed: {listed}")
    (work / "check").mkdir()
    for ref in store.list():
        key = str(ref)
        if key not in materials.digests:
            continue
        if ref.digest != materials.digests[key]:
            problems.append(f"{key} is visible with manifest {ref.digest}, not the published one")
        try:
            store.download(ref, work / "check" / key)
            assert_metadata_equal(materials.expected[key], capture_tree(work / "check" / key), stage=key)
        except (ArtifactkitError, OSError) as err:
            problems.append(f"{key} does not download exactly: {type(err).__name__}: {err}")
    leftovers = 0
    if scenario == "download":
        problems += _check_destination(materials, work / "out")
        leftovers = sum(1 for name in os.listdir(work / "out") if name != "dest")
    try:
        store.gc()
        after = store.verify()
        if not after.clean or os.listdir(store.layout.staging_dir):
            problems.append(f"gc did not leave a clean store: {attrs.asdict(after)}")
    except (ArtifactkitError, OSError) as err:
        problems.append(f"gc failed after the kill: {type(err).__name__}: {err}")
    return problems, leftovers


def _check_destination(materials: Materials, out: Path) -> list[str]:
    """A download destination is absent or complete; anything else next to it is our staging."""
    problems = []
    strays = [name for name in os.listdir(out) if name != "dest" and not name.startswith(".dest.artifactkit-")]
    if strays:
        problems.append(f"unexpected entries next to the destination: {strays}")
    if os.path.lexists(out / "dest"):
        try:
            assert_metadata_equal(materials.expected["demo@1"], capture_tree(out / "dest"), stage="dest")
        except (ArtifactkitError, OSError) as err:
            problems.append(f"the destination is visible but incomplete: {err}")
    return problems


def trial(materials: Materials, scenario: str, work: Path, *, point: int | None = None, label: str = "",
          delay_s: float | None = None) -> Trial:
    """Run one kill trial in ``work`` (must not exist) and check it."""
    work.mkdir()
    killed, _ = run_child(materials, scenario, work, kill_after=point, delay_s=delay_s)
    problems, leftovers = check_trial(materials, scenario, work)
    return Trial(scenario=scenario, point=point, label=label, killed=killed, problems=tuple(problems),
                 download_leftovers=leftovers)


def ordering_points(labels: list[str]) -> list[tuple[int, str]]:
    """Kill targets around every rename/fsync/syncfs: just before it (after the previous call) and after."""
    targets: dict[int, str] = {}
    for index, label in enumerate(labels, start=1):
        if label.split(" ", 1)[0] in ORDERING_KINDS:
            targets.setdefault(index - 1, f"before {label}")
            targets[index] = f"after {label}"
    return sorted(targets.items())


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))

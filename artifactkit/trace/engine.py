"""Traced publish/download cycles under competing readers: the engine behind ``artifactkit diagnose``.

Each cycle materializes a corpus tree with historical ns times, publishes it, waits the observation
window, checks the publish stage against the values *originally supplied*, downloads, waits, and
checks the download stage. Readers (separate processes) read every file all along; an inotify
watcher, an audit hook on this process and, with CAP_SYS_ADMIN, fanotify account for every access.

The observation window is ``interval_ms`` *and* one complete pass of every reader that started after
the stage finished: a clean result then proves that reads happened and moved nothing, instead of
merely that no reader happened to come by.
"""

from __future__ import annotations

import collections
import contextlib
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Literal

import attrs

from artifactkit._fanotify import FanotifyUnavailable
from artifactkit._fsutil import remove_tree
from artifactkit.conformance.corpus import corpus_names, materialize
from artifactkit.engine.reference.scan import capture_tree
from artifactkit.engine.select import EngineInfo, engine_info
from artifactkit.errors import IsolationError, MetadataMismatchError, TimestampNotRepresentable
from artifactkit.isolation.probe import AtimeProbe, probe_atime
from artifactkit.isolation.reader_processes import ReaderPool
from artifactkit.isolation.tree import REMEDY, private_noatime_tree
from artifactkit.metadata.compare import assert_metadata_equal
from artifactkit.metadata.drift import classify_time
from artifactkit.metadata.flags import get_flags
from artifactkit.metadata.mismatch import Mismatch
from artifactkit.metadata.model import FileMeta
from artifactkit.metadata.times import deepest_first
from artifactkit.store.store import Store
from artifactkit.trace.attribution import Accesses, account
from artifactkit.trace.tracer import FanotifyTracer, start_tracer, tree_mount
from artifactkit.trace.watcher import SelfOpenTracer, Watcher, WatchSummary

Isolation = Literal["auto", "flag", "none"]
Copier = Literal["store", "shutil"]
ISOLATIONS: Final = ("auto", "flag", "none")
COPIERS: Final = ("store", "shutil")
ARTIFACT: Final = "diagnose"


@attrs.frozen
class DiagnoseConfig:
    """What to run; defaults are the CLI's. ``fanotify=False`` forces inotify-only accounting."""

    cycles: int = 50
    interval_ms: int = 1
    readers: int = 4
    isolation: Isolation = "auto"
    copier: Copier = "store"
    base: str | None = None
    corpus: str = "basic"
    fanotify: bool = True

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.cycles < 1:
            problems.append(f"cycles must be >= 1, got {self.cycles}")
        if self.interval_ms < 0:
            problems.append(f"interval_ms must be >= 0, got {self.interval_ms}")
        if self.readers < 0:
            problems.append(f"readers must be >= 0, got {self.readers}")
        if self.isolation not in ISOLATIONS:
            problems.append(f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}")
        if self.copier not in COPIERS:
            problems.append(f"copier must be one of {', '.join(COPIERS)}, got {self.copier!r}")
        if self.corpus not in corpus_names():
            problems.append(f"no corpus tree {self.corpus!r} (bundled: {', '.join(corpus_names())})")
        if problems:
            raise ValueError("; ".join(problems))


@attrs.frozen
class Finding:
    """One mismatch seen in one cycle; ``tree`` says which copy was checked."""

    cycle: int
    stage: str        #: "publish" or "download"
    tree: str         #: "manifest", "store", "source", "staging" (the store's own check) or "destination"
    mismatch: Mismatch


@attrs.frozen
class Environment:
    """Where the run happened (all of it safe to publish: no paths, user or host names)."""

    kernel: str
    machine: str
    python: str
    fs_type: str
    mount_options: tuple[str, ...]
    atime_policy: str
    isolation_requested: str
    isolation_mode: str   #: "flag", "noatime-mount" or "none"
    verified_how: str
    copier: str
    corpus: str
    readers: int
    fanotify: str         #: "available: …" (held, or notification only and why) or "unavailable: <why>"
    engine: EngineInfo    #: the store engine the cycles' publishes and downloads ran on (the "store" copier's)


@attrs.frozen
class CycleProgress:
    """Handed to a progress callback after each cycle."""

    cycle: int
    cycles: int
    mismatches: int
    reads: int
    workspace: str


@attrs.frozen
class DiagnoseResult:
    """Everything a run found; :mod:`artifactkit.trace.evidence` turns it into ``artifactkit.diagnose/1``."""

    config: DiagnoseConfig
    environment: Environment
    cycles_run: int
    checks: int
    failed_checks: int
    findings: tuple[Finding, ...]
    competing_reads: int
    inotify: WatchSummary
    accesses: Accesses
    duration_ns: int

    @property
    def interval_ns(self) -> int:
        """The configured observation interval in ns."""
        return self.config.interval_ms * 1_000_000

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return self.failed_checks == 0

    @property
    def source_atime_moved(self) -> bool:
        """Whether any source entry's atime moved away from the supplied value during publish."""
        return any(f.tree == "source" and f.mismatch.field == "atime_ns" for f in self.findings)

    def by_diagnosis(self) -> dict[str, int]:
        """Mismatch count per diagnosis."""
        return dict(collections.Counter(f.mismatch.diagnosis for f in self.findings))


@attrs.frozen
class _Workspace:
    path: str
    mode: str
    verified_how: str
    close: Callable[[], None]


def _open_workspace(isolation: Isolation, base: str, probe: AtimeProbe, where: str) -> _Workspace:
    """The work tree, made in ``where`` (a directory on ``base``'s filesystem)."""
    if isolation == "none":
        path = tempfile.mkdtemp(prefix="artifactkit-diagnose-", dir=where)
        inherited = get_flags(path).noatime
        how = ("none (control run): no flag set; reads " + ("move" if probe.reads_move_atime else "do not move")
               + f" atime here (policy {probe.atime_policy})")
        if inherited:
            how += "; the base already passes FS_NOATIME_FL down, so this control cannot show drift"
        return _Workspace(path, "none", how, lambda: remove_tree(path, ignore_errors=True))
    if isolation == "flag" and not probe.reads_move_atime:
        raise IsolationError(
            f"--isolation flag on {probe.fs_type} ({base}): reads never move atime here, so FS_NOATIME_FL "
            "cannot be proven effective (no positive control); remedy: use --isolation auto on this "
            f"filesystem, or {REMEDY.replace('--artifactkit-base', '--base')}",
            fs_type=probe.fs_type, base=base, failed="no-positive-control")
    try:
        tree = private_noatime_tree(where, probe=probe)
    except IsolationError as err:
        # The fixture's remedy names the pytest option; on the command line the knob is --base.
        message = err.message.replace("--artifactkit-base", "--base")
        raise IsolationError(message, **err.context) from err
    return _Workspace(str(tree.path), tree.mode, tree.verified_how, tree.close)


def run_diagnose(config: DiagnoseConfig, *,
                 progress: Callable[[CycleProgress], None] | None = None) -> DiagnoseResult:
    """Run the cycles; raise :class:`IsolationError` (or ``OSError``) when setup cannot be done.

    ``KeyboardInterrupt`` stops readers, watcher and tracer and removes the work tree on its way out.
    """
    base = os.path.realpath(config.base or tempfile.gettempdir())
    if not os.path.isdir(base):
        raise FileNotFoundError(2, "--base is not a directory", base)
    probe = probe_atime(base)
    # The work tree lives in a directory that is a mount of its own from the moment it exists, while
    # still empty: the tracer marks that mount, so only opens in it wait on the holder (not every
    # open on the base's mount, often /), and no walk that began before can be inside it unseen.
    # Traced from then on, before anything is inside, so every outside process in it meets a held
    # open first (none was already there with a directory open, to be named only late or never).
    root = tempfile.mkdtemp(prefix="artifactkit-diagnose-", dir=base)
    try:
        with tree_mount(root) if config.fanotify else contextlib.nullcontext(False), \
                _fanotify(config, root) as (fan, fan_status):
            workspace = _open_workspace(config.isolation, base, probe, root)
            try:
                return _run_in(workspace, config, probe, progress, fan=(fan, fan_status), base=base)
            finally:
                workspace.close()
    finally:
        remove_tree(root, ignore_errors=True)


@contextlib.contextmanager
def _fanotify(config: DiagnoseConfig, root: str) -> Iterator[tuple[FanotifyTracer | None, str]]:
    """The tracer on ``root`` (or None) and what the environment says about it; ended on every way out."""
    if not config.fanotify:
        yield None, "unavailable: disabled for this run (inotify accounting only)"
        return
    try:
        fan = start_tracer([root])
    except FanotifyUnavailable as err:
        yield None, str(err.strerror)
        return
    try:
        yield fan, fan.status
    finally:
        fan.close()  # a no-op after _run_in's stop(); on an error path, the holder must not outlive us


def _run_in(ws: _Workspace, config: DiagnoseConfig, probe: AtimeProbe,
            progress: Callable[[CycleProgress], None] | None, *, fan: tuple[FanotifyTracer | None, str],
            base: str) -> DiagnoseResult:
    started = time.monotonic_ns()
    engine = engine_info()  # before the first cycle: the one every cycle's operations get
    roots = [os.path.join(ws.path, part) for part in ("src", "store", "dest")]
    for root in [*roots, os.path.join(ws.path, "build")]:
        os.mkdir(root, 0o700)
    findings: list[Finding] = []
    failed: set[tuple[int, str]] = set()
    done = 0
    fan_tracer, fan_status = fan
    with SelfOpenTracer([ws.path]) as tracer:
        watcher = Watcher(ws.path, [ws.path])
        try:
            pool = ReaderPool(roots, config.readers)
            try:
                pool.wait_started()
                if fan_tracer is not None:
                    fan_tracer.confine(pool.pids)
                cycle = _Cycle(config, roots, pool)
                for done in range(1, config.cycles + 1):
                    for finding in cycle.run(done):
                        findings.append(finding)
                        failed.add((finding.cycle, finding.stage))
                    if progress is not None:
                        progress(CycleProgress(done, config.cycles, len(findings), pool.reads, ws.path))
            finally:
                pool.stop()
        finally:
            try:
                watch = watcher.stop()
            finally:
                fan_report = fan_tracer.stop() if fan_tracer is not None else None
    accesses = account(watch.opens, tracer.opens, reader_pids=pool.pids, reader_opens=pool.opens, fan=fan_report,
                       places=[(ws.path, "<work>"), (base, "<base>")])
    return DiagnoseResult(
        config=config, environment=_environment(config, probe, ws, fan_status, engine), cycles_run=done,
        checks=2 * done, failed_checks=len(failed), findings=tuple(findings), competing_reads=pool.reads,
        inotify=watch, accesses=accesses, duration_ns=time.monotonic_ns() - started)


class _Cycle:
    """One publish/download round trip with its two checks."""

    def __init__(self, config: DiagnoseConfig, roots: Sequence[str], pool: ReaderPool) -> None:
        self.config = config
        self.src_root, self.store_root, self.dest_root = roots
        # Sources are built where readers do not look, then renamed into view: the supplied values
        # are read back by materialize, and a reader there would fail that read-back, not a stage.
        self.build_root = os.path.join(os.path.dirname(self.src_root), "build")
        self.store = Store(self.store_root)
        self.pool = pool

    def observe(self) -> None:
        """The observation window: the interval, then a full pass of every reader begun after it."""
        since = self.pool.sweeps()
        if self.config.interval_ms:
            time.sleep(self.config.interval_ms / 1000)
        if self.pool.pids:
            self.pool.wait_full_sweep(since)

    def run(self, index: int) -> list[Finding]:
        name = f"c{index:04d}"
        src = os.path.join(self.src_root, name)
        dest = os.path.join(self.dest_root, name)
        copied = os.path.join(self.store_root, name)
        supplied = materialize(self.config.corpus, os.path.join(self.build_root, name))
        os.rename(os.path.join(self.build_root, name), src)  # same directory tree: the inode keeps its flags
        found: list[Finding] = []
        if self.config.copier == "store":
            ref = self.store.publish(src, ARTIFACT)
            self.observe()
            found += _check(index, "publish", "manifest", supplied, self.store.manifest(ref).entries)
        else:
            copy2_tree(src, copied, supplied)
            self.observe()
            found += _check(index, "publish", "store", supplied, capture_tree(copied))
        found += _check(index, "publish", "source", supplied, capture_tree(src, hash_content=False))
        downloaded = True
        if self.config.copier == "store":
            try:
                self.store.download(ref, dest)
            except MetadataMismatchError as err:
                # The store verifies before making the download visible: a reader got in first.
                found += [Finding(index, "download", "staging", m) for m in err.context["mismatches"]]
                downloaded = False
            except TimestampNotRepresentable as err:
                # The restore's read-back after utime saw another value: on a filesystem that holds
                # these times (materialize proved it) that is a read between the two, not the range.
                found.append(Finding(index, "download", "staging", _unstored(err)))
                downloaded = False
        else:
            copy2_tree(copied, dest, supplied)
        self.observe()
        if downloaded:
            found += _check(index, "download", "destination", supplied, capture_tree(dest))
        # Keep the readers' passes short: only the store itself accumulates (one manifest a cycle).
        for path in (src, dest, copied):
            remove_tree(path, ignore_errors=True)
        return found


def _check(cycle: int, stage: str, tree: str, supplied: Sequence[FileMeta],
           actual: Sequence[FileMeta]) -> list[Finding]:
    try:
        assert_metadata_equal(supplied, actual, stage=stage)
    except MetadataMismatchError as err:
        return [Finding(cycle, stage, tree, m) for m in err.context["mismatches"]]
    return []


def _unstored(err: TimestampNotRepresentable) -> Mismatch:
    ctx = err.context
    expected, actual, field = int(ctx["expected"]), int(ctx["actual"]), str(ctx["field"])
    diagnosis = classify_time(expected, actual, field=field, ctime_ns=None) or "differs"
    return Mismatch(str(ctx["path"]), field, expected, actual, diagnosis, delta_ns=actual - expected, stage="download")


def copy2_tree(src: str, dst: str, entries: Sequence[FileMeta]) -> None:
    """The comparator: ``shutil.copy2(str, str)`` per file and link, ``copystat`` per directory.

    ``copy2`` stats the source *after* reading it, so a read that moved the source's atime is
    copied along; directories get ``copystat`` last, deepest first, as a careful script would.
    """
    os.mkdir(dst, 0o700)
    ordered = sorted(entries, key=lambda e: e.path)
    for entry in ordered:
        if entry.path == ".":
            continue
        source, target = os.path.join(src, entry.path), os.path.join(dst, entry.path)
        if entry.kind == "dir":
            os.mkdir(target, 0o700)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
    for path in deepest_first(e.path for e in ordered if e.kind == "dir"):
        shutil.copystat(os.path.join(src, path), os.path.join(dst, path))


def _environment(config: DiagnoseConfig, probe: AtimeProbe, ws: _Workspace, fan_status: str,
                 engine: EngineInfo) -> Environment:
    return Environment(
        kernel=platform.release(), machine=platform.machine(), python=platform.python_version(),
        fs_type=probe.fs_type, mount_options=probe.mount_options, atime_policy=probe.atime_policy,
        isolation_requested=config.isolation, isolation_mode=ws.mode, verified_how=ws.verified_how,
        copier=config.copier, corpus=config.corpus, readers=config.readers, fanotify=fan_status, engine=engine)


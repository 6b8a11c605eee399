"""Worker processes for publish and download: the same bytes and metadata as in-process, the same errors,
nothing left behind when a worker or the parent dies, and no re-run of the caller's script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from artifactkit import Store, assert_metadata_equal
from artifactkit.conformance.corpus import corpus_names, materialize, needs_root
from artifactkit.errors import IntegrityError, SourceChangedError
from artifactkit.metadata.model import FileMeta
from artifactkit.store import workers
from artifactkit.store.engines import PythonExecutor
from artifactkit.store.publish import capture_source, publish_tree
from artifactkit.store.scan import capture_tree
from artifactkit.store.workers import WorkerFailedError, WorkerPool, choose_workers

OLD = 1_000_000_000_123_456_789


def _many(root: Path, dirs: int, per_dir: int, distinct: int | None = None) -> Path:
    """``dirs`` x ``per_dir`` small files with historical times; ``distinct`` contents if given."""
    for d in range(dirs):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(per_dir):
            number = d * per_dir + f
            path = root / f"d{d}" / f"f{f}"
            path.write_bytes(b"x" * (number % distinct) if distinct else os.urandom(64) + bytes([number % 251]))
            os.utime(path, ns=(OLD + number, OLD + 7 * number))
    return root


def _content_facts(entries: tuple[FileMeta, ...]) -> dict[str, tuple[object, ...]]:
    return {e.path: (e.kind, e.size, e.sha256, e.flags, e.extents, e.hardlink, e.xattrs, e.target) for e in entries}


def _staging_left(store: Store) -> list[str]:
    return os.listdir(store.layout.staging_dir)


@pytest.fixture
def child_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Children are waited for until ready when a pool starts (else the parent may do every batch of a
    small tree before a child has imported anything) and every batch a child answers is counted, so a
    test can show the worker path ran."""
    answered: list[int] = []
    real_init, real_receive = WorkerPool.__init__, workers._Child.receive

    def init_and_wait(self: WorkerPool, count: int, task: str) -> None:
        real_init(self, count, task)
        for child in self._children:
            assert child.wait_ready()

    def counting(self: workers._Child) -> tuple[int, object]:
        number, value = real_receive(self)
        answered.append(number)
        return number, value
    monkeypatch.setattr(WorkerPool, "__init__", init_and_wait)
    monkeypatch.setattr(workers._Child, "receive", counting)
    return answered


# -- how many ---------------------------------------------------------------------------------------------

def test_the_automatic_choice_works_in_process_below_the_threshold_and_uses_the_cores_above(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARTIFACTKIT_WORKERS", raising=False)
    monkeypatch.setattr(workers, "available_cores", lambda: 2)
    assert choose_workers(None, workers.PARALLEL_MIN_FILES - 1) == 1
    assert choose_workers(None, workers.PARALLEL_MIN_FILES) == 2
    # Asked for: capped by the cores and by one process per batch (BATCH_FILES files).
    assert choose_workers(3, 10) == 1 and choose_workers(3, 10**6) == 2 and choose_workers(1, 10**6) == 1
    assert choose_workers(2, workers.BATCH_FILES + 1) == 2
    monkeypatch.setenv("ARTIFACTKIT_WORKERS", "4")
    assert choose_workers(None, 10**6) == 2 and choose_workers(None, 10) == 1
    with pytest.raises(ValueError, match="at least 1"):
        choose_workers(0, 10)


def _count_children(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    real_init = workers._Child.__init__

    def counting(self: workers._Child, task: str) -> None:
        started.append(task)
        real_init(self, task)
    monkeypatch.setattr(workers._Child, "__init__", counting)
    return started


def test_a_huge_request_for_a_one_file_tree_starts_no_worker_process(fast_tmp: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers 40`` started 39 interpreters for one file (``--workers 10000``: load 145)."""
    started = _count_children(monkeypatch)
    store = Store(fast_tmp / "store")
    ref = store.publish(_many(fast_tmp / "src", dirs=1, per_dir=1), "one", workers=10_000)
    store.download(ref, fast_tmp / "out", workers=40)
    assert started == []


def test_a_big_request_is_capped_by_the_cpus_this_process_may_use_and_one_worker_per_batch() -> None:
    cores = len(os.sched_getaffinity(0))
    assert choose_workers(10_000, 10**6) == cores
    assert choose_workers(10_000, workers.BATCH_FILES) == 1
    assert choose_workers(10_000, workers.BATCH_FILES + 1) == min(2, cores)
    # The affinity mask as taskset sets it, for real: one CPU allowed is one process, asked or automatic.
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from artifactkit.store.workers import choose_workers; print(choose_workers(10_000, 10**6), "
            "choose_workers(None, 10**6))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("ARTIFACTKIT_WORKERS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "1"]


def test_a_big_request_for_a_tree_of_three_batches_starts_at_most_a_child_per_other_cpu(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _count_children(monkeypatch)
    store = Store(fast_tmp / "store")
    ref = store.publish(_many(fast_tmp / "src", dirs=5, per_dir=100), "three", workers=64)
    store.download(ref, fast_tmp / "out", workers=64)
    most = min(3, len(os.sched_getaffinity(0))) - 1
    assert 0 < started.count("publish") <= most and 0 < started.count("download") <= most, started


# -- the same result ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in corpus_names() if n != "special-modes"])
def test_every_corpus_publishes_to_the_same_manifest_and_downloads_exactly_with_workers(
        fast_tmp: Path, name: str, child_batches: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    if needs_root(name):
        pytest.skip(f"corpus {name!r} needs root here: {needs_root(name)}")
    # A corpus is a few files: batches of one, so that it needs the workers it is given (one per batch).
    monkeypatch.setattr(workers, "BATCH_FILES", 1)
    supplied = materialize(name, fast_tmp / "src")
    alone, pooled = Store(fast_tmp / "alone"), Store(fast_tmp / "pooled")
    ref_pooled = pooled.publish(fast_tmp / "src", name, workers=3)
    assert_metadata_equal(supplied, pooled.manifest(ref_pooled).entries, stage=f"publish {name} with workers")
    # Listing a directory or reading a link on this relatime tmpfs may move its atime: the second
    # publish is compared on what each read found (digests, flags, holes, links), not on times.
    ref_alone = alone.publish(fast_tmp / "src", name, workers=1)
    assert _content_facts(pooled.manifest(ref_pooled).entries) == _content_facts(alone.manifest(ref_alone).entries)
    pooled.download(ref_pooled, fast_tmp / "out", workers=3)
    assert_metadata_equal(supplied, capture_tree(fast_tmp / "out"), stage=f"download {name} with workers")
    assert _staging_left(pooled) == []
    assert child_batches, "no child process did any of the work"


def test_content_staged_by_two_workers_is_stored_once(fast_tmp: Path, child_batches: list[int]) -> None:
    src = _many(fast_tmp / "src", dirs=6, per_dir=100, distinct=3)  # the same 3 contents in every batch
    store = Store(fast_tmp / "store")
    ref = store.publish(src, "dup", workers=3)
    assert ref.digest == Store(fast_tmp / "alone").publish(src, "dup", workers=1).digest  # files only: no atime moves
    assert sorted(os.listdir(store.layout.blobs_dir)) == sorted(os.listdir(Store(fast_tmp / "alone").layout.blobs_dir))
    assert len(os.listdir(store.layout.blobs_dir)) == 3 and _staging_left(store) == []
    store.download(ref, fast_tmp / "out", workers=3)
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "out"), stage="download")
    assert child_batches, "no child process did any of the work"


# -- the same errors, nothing left ----------------------------------------------------------------------------

def test_a_file_changed_after_capture_is_refused_by_the_worker_that_reads_it(
        fast_tmp: Path, child_batches: list[int]) -> None:
    src = _many(fast_tmp / "src", dirs=4, per_dir=100)
    store = Store(fast_tmp / "store")
    store.layout.create()
    tree = capture_source(src)
    (src / "d3" / "f99").write_bytes(b"changed after the capture")  # in the last batch: a worker's
    with pytest.raises(SourceChangedError, match=r"d3/f99"), store.backend.open() as opened, \
            PythonExecutor(3, "publish") as executor:
        publish_tree(opened, tree, "late", executor=executor)
    assert store.list() == [] and _staging_left(store) == []


def test_a_corrupt_blob_read_by_a_worker_fails_the_download_and_leaves_no_destination(
        fast_tmp: Path, child_batches: list[int]) -> None:
    src = _many(fast_tmp / "src", dirs=4, per_dir=100)
    store = Store(fast_tmp / "store")
    ref = store.publish(src, "demo", workers=1)
    victim = store.manifest(ref).entries[-1]
    assert victim.sha256 is not None
    blob = Path(store.layout.blob_path(victim.sha256))
    blob.chmod(0o644)
    blob.write_bytes(b"rotten")
    with pytest.raises(IntegrityError, match="corrupt") as caught:
        store.download(ref, fast_tmp / "out", workers=3)
    assert caught.value.failed == "corrupt"
    assert not (fast_tmp / "out").exists() and [p for p in os.listdir(fast_tmp) if p.startswith(".out.")] == []


def test_a_worker_that_dies_mid_publish_fails_it_with_nothing_visible(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, child_batches: list[int]) -> None:
    src = _many(fast_tmp / "src", dirs=4, per_dir=100)
    real_send = workers._Child.send

    def send_then_die(self: workers._Child, *args: object) -> None:
        real_send(self, *args)  # type: ignore[arg-type]
        self.proc.kill()
    monkeypatch.setattr(workers._Child, "send", send_then_die)
    store = Store(fast_tmp / "store")
    with pytest.raises(WorkerFailedError, match="exited"):
        store.publish(src, "demo", workers=2)
    assert store.list() == [] and _staging_left(store) == []


def test_a_worker_that_cannot_start_is_an_error_when_asked_for_and_in_process_when_automatic(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _many(fast_tmp / "src", dirs=2, per_dir=50)
    monkeypatch.delenv("ARTIFACTKIT_WORKERS", raising=False)
    monkeypatch.setattr(workers, "PARALLEL_MIN_FILES", 10)
    monkeypatch.setattr(workers, "BATCH_FILES", 10)  # 100 files: enough batches for a worker
    monkeypatch.setattr(workers, "available_cores", lambda: 2)
    monkeypatch.setattr(sys, "executable", str(fast_tmp / "no-such-python"))
    store = Store(fast_tmp / "store")
    with pytest.raises(WorkerFailedError, match="cannot start a worker"):
        store.publish(src, "asked", workers=2)
    ref = store.publish(src, "automatic")  # the same tree, automatic: in-process, and complete
    store.download(ref, fast_tmp / "out")
    assert_metadata_equal(capture_tree(src), capture_tree(fast_tmp / "out"), stage="download")


def test_the_automatic_choice_starts_workers_only_for_a_big_tree(fast_tmp: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started = _count_children(monkeypatch)
    monkeypatch.delenv("ARTIFACTKIT_WORKERS", raising=False)
    monkeypatch.setattr(workers, "available_cores", lambda: 2)
    monkeypatch.setattr(workers, "PARALLEL_MIN_FILES", 150)
    store = Store(fast_tmp / "store")
    small = store.publish(_many(fast_tmp / "small", dirs=1, per_dir=100), "small")
    store.download(small, fast_tmp / "small-out")
    assert started == []
    big = store.publish(_many(fast_tmp / "big", dirs=4, per_dir=100), "big")
    store.download(big, fast_tmp / "big-out")
    assert started == ["publish", "download"]


# -- processes ------------------------------------------------------------------------------------------------

def test_workers_die_with_a_killed_parent(fast_tmp: Path) -> None:
    script = textwrap.dedent("""
        import sys, time
        from artifactkit.store.workers import WorkerPool
        pool = WorkerPool(3, "publish")
        print(*(child.proc.pid for child in pool._children), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10  # waits for the kernel's SIGKILL to land, not for a result to change
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), "a worker outlived its killed parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_script_without_a_main_guard_publishes_once(fast_tmp: Path) -> None:
    """multiprocessing's spawn would re-import this script in every worker and publish again."""
    src = _many(fast_tmp / "src", dirs=2, per_dir=150)  # two batches: a worker is started
    script = fast_tmp / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from artifactkit import Store
        store = Store({str(fast_tmp / "store")!r})
        ref = store.publish({str(src)!r}, "demo", workers=2)
        store.download(ref, {str(fast_tmp / "out")!r}, workers=2)
        print("published", ref.version)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["published 1", ""]
    assert [ref.version for ref in Store(fast_tmp / "store").list()] == [1]


def test_a_failed_batch_raises_its_own_exception_after_every_child_is_killed() -> None:
    with WorkerPool(2, "publish") as pool:
        children = [child.proc for child in pool._children]
        # The child's batch is malformed (TypeError there), the parent's divides by zero: either is raised.
        with pytest.raises((ZeroDivisionError, TypeError)):
            pool.run(None, [[1], [2], [3], [4]], lambda batch: [1 // 0])
        assert all(proc.poll() is not None for proc in children)  # killed and reaped before the raise


@pytest.mark.parametrize("child", ["sleep 30", "exit 3"], ids=["still-starting", "died-starting"])
def test_the_parent_never_waits_for_a_child_that_is_not_ready(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                              child: str) -> None:
    fake = fast_tmp / "python"
    fake.write_text(f"#!/bin/sh\n{child}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    started = time.monotonic()
    with WorkerPool(2, "publish") as pool:
        procs = [c.proc for c in pool._children]
        assert pool.run(None, [[1], [2], [3]], lambda batch: [batch[0] * 2]) == [[2], [4], [6]]
    assert time.monotonic() - started < 10  # not the child's 30 s: it was given nothing, and is killed
    assert all(proc.poll() is not None for proc in procs)


def test_a_childs_exception_is_raised_in_the_parent_as_itself(child_batches: list[int]) -> None:
    with WorkerPool(2, "publish") as pool:
        child = pool._children[0]
        # One batch: the ready child takes it (the parent has none left to do) and fails on the staging dir.
        with pytest.raises(FileNotFoundError) as caught:
            pool.run(("/nonexistent-src", "/nonexistent-staging", (0, 0), "/nonexistent-blobs", (0, 0), 1),
                     [[(0, "f", 1, 1, 1, 0, 0)]], lambda batch: pytest.fail("the parent was not meant to take it"))
        assert caught.value.filename == "/nonexistent-staging"
        # Where it was raised travels with it: the child's traceback, as a note.
        assert any("raised in worker process" in note and "stage_batch" in note for note in caught.value.__notes__)
        assert child.proc.poll() is not None  # killed and reaped before the raise


def test_small_pipes_cannot_deadlock_a_publish(fast_tmp: Path) -> None:
    """A user past pipe-user-pages-soft gets 8 KiB pipes: one batch per child then, never two."""
    src = _many(fast_tmp / "src", dirs=10, per_dir=200)
    script = textwrap.dedent(f"""
        import fcntl
        from artifactkit import Store
        from artifactkit.store import workers
        def narrow(stream):
            fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, 4096)
            return False
        workers._widen = narrow
        real_init = workers.WorkerPool.__init__
        def init_and_wait(self, count, task):
            real_init(self, count, task)
            for child in self._children:
                assert child.wait_ready()
        workers.WorkerPool.__init__ = init_and_wait
        ref = Store({str(fast_tmp / "store")!r}).publish({str(src)!r}, "demo", workers=2)
        print("published", ref.version)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "published 1", done.stderr


def test_a_worker_never_imports_from_the_current_directory(fast_tmp: Path) -> None:
    trap = fast_tmp / "cwd"
    trap.mkdir()
    (trap / "struct.py").write_text(f"open({str(fast_tmp / 'imported')!r}, 'w').close()\nraise SystemExit(9)\n")
    script = textwrap.dedent("""
        from artifactkit.store.workers import WorkerPool
        with WorkerPool(2, "publish") as pool:
            assert pool._children[0].wait_ready(), "the worker died while starting"
        print("ready")
    """)
    # The parent runs with -P so that only the worker could put the current directory on its path.
    done = subprocess.run([sys.executable, "-P", "-c", script], cwd=trap, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.stdout.strip() == "ready", done.stderr
    assert not (fast_tmp / "imported").exists()


def test_a_path_object_in_sys_path_does_not_stop_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path, Path("/nonexistent-path-object")])
    with WorkerPool(2, "publish") as pool:
        assert pool._children[0].wait_ready()


def test_a_worker_refuses_a_blobs_directory_that_is_not_the_parents(fast_tmp: Path, child_batches: list[int]) -> None:
    """Whether a blob exists decides what is staged: a worker checks it asks the parent's blobs directory."""
    (fast_tmp / "txn").mkdir()
    (fast_tmp / "blobs").mkdir()
    txn = os.stat(fast_tmp / "txn")
    src = _many(fast_tmp / "src", dirs=1, per_dir=1)
    entry = os.stat(src / "d0" / "f0")
    item = (0, "d0/f0", entry.st_size, entry.st_mtime_ns, entry.st_ctime_ns, entry.st_dev, entry.st_ino)
    with WorkerPool(2, "publish") as pool, pytest.raises(FileNotFoundError, match="blobs directory was replaced"):
        pool.run((str(src), str(fast_tmp / "txn"), (txn.st_dev, txn.st_ino), str(fast_tmp / "blobs"), (0, 0), 1),
                 [[item]], lambda batch: pytest.fail("the parent was not meant to take it"))


def test_a_download_worker_imports_neither_the_pool_nor_the_comparison_modules() -> None:
    """Its start-up is on the critical path of a download with workers: what only the parent or only a
    mismatch needs is imported where it is needed (~23 ms of ~135 ms to "ready")."""
    code = ("import sys, artifactkit.store.download, artifactkit.store.stage; "
            "print(' '.join(sorted(sys.modules)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    loaded = set(subprocess.run([sys.executable, "-S", "-P", "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.split())
    assert "artifactkit.store.download" in loaded
    assert not loaded & {"artifactkit.store.workers", "artifactkit.metadata.compare", "shutil", "subprocess",
                         "secrets", "selectors"}

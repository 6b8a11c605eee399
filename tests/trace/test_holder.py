"""The holder's rules, in this process on a real permission group: name before answering, answer
ourselves without naming, never leave an opener waiting, keep a reused pid apart, open nothing."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from artifactkit._fanotify import _METADATA, FanMask, mark_mount, open_group, path_of
from artifactkit.trace import holder as holder_module
from artifactkit.trace.holder import HOLD_MASK, Holder
from artifactkit.trace.procnames import ProcessName, name_process
from tests.support.capability import require_holding_openers


@pytest.fixture
def traced(tmpfs_relatime: Path) -> Iterator[Path]:
    require_holding_openers()
    path = Path(tempfile.mkdtemp(prefix="holder-", dir=tmpfs_relatime))
    (path / "file").write_bytes(b"data")
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)


class Running:
    """A :class:`Holder` on its own thread of this process, as the holder process runs it."""

    def __init__(self, traced: Path, namer: Callable[..., ProcessName], gate: threading.Event | None = None) -> None:
        self._gate = gate
        self.fd = open_group(permission=True)
        mark_mount(self.fd, str(traced), HOLD_MASK)
        self.holder = Holder(self.fd, [str(traced)], permission=True, own_pids=[os.getpid()], namer=namer)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        if self._gate is not None:
            self._gate.wait(30)
        try:
            while not self._stop.is_set():
                if select.select([self.fd], [], [], 0.02)[0]:
                    self.holder.drain()
        except BaseException as err:  # noqa: BLE001 - the test looks at it
            # The group stays open until stop(): what let the opener through was Holder.handle
            # itself, not the process closing the group (its second line of defence).
            self.error = err

    def stop(self) -> dict[str, Any]:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(30)
            assert not self._thread.is_alive()
            os.close(self.fd)
            self.holder.close()
        return self.holder.report()


@contextlib.contextmanager
def running(traced: Path, namer: Callable[..., ProcessName] = name_process,
            gate: threading.Event | None = None) -> Iterator[Running]:
    run = Running(traced, namer, gate)
    try:
        yield run
    finally:
        run.stop()


def test_an_opener_is_named_while_its_open_waits_and_answered_after(traced: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[tuple[str, ...]] = []
    real_allow = holder_module.allow

    def recording_allow(group_fd: int, event_fd: int) -> None:
        order.append(("answer", path_of(event_fd)))
        real_allow(group_fd, event_fd)

    def recording_namer(pid: int, *, budget_ns: int) -> ProcessName:
        name = name_process(pid, budget_ns=budget_ns)
        order.append(("name", name.executable))
        return name

    monkeypatch.setattr(holder_module, "allow", recording_allow)
    with running(traced, recording_namer) as run:
        cat = subprocess.run(["cat", str(traced / "file")], capture_output=True, check=True, timeout=30)
        report = run.stop()
    assert cat.stdout == b"data"
    # Named first (so it was still there to be named: its open could not return before the answer).
    assert order.index(("name", "cat")) < order.index(("answer", str(traced / "file")))
    assert report["hold"]["named_while_held"] == 1


def test_our_own_events_are_answered_without_naming(traced: Path) -> None:
    asked: list[int] = []

    def recording_namer(pid: int, *, budget_ns: int) -> ProcessName:
        asked.append(pid)
        return name_process(pid, budget_ns=budget_ns)

    with running(traced, recording_namer) as run:
        assert (traced / "file").read_bytes() == b"data"  # this thread's open waits on the holder's thread
        report = run.stop()
    assert asked == []
    ours = [p for p in report["processes"] if p["pid"] == os.getpid()]
    assert [(p["named"], p["chain"], p["argv"]) for p in ours] == [("self", [], [])]
    assert ours[0]["events"] >= 1


def test_when_naming_fails_the_opener_still_goes_on(traced: Path) -> None:
    def failing_namer(pid: int, *, budget_ns: int) -> ProcessName:
        raise RuntimeError("naming broke")

    with running(traced, failing_namer) as run:
        # Done while the group is still open (stop() closes it): the holder answered on its way out.
        cat = subprocess.run(["cat", str(traced / "file")], capture_output=True, timeout=10, check=False)
        run.stop()
    assert (cat.returncode, cat.stdout) == (0, b"data")
    assert isinstance(run.error, RuntimeError)


def _waiting_in_open(pid: int) -> bool:
    with open(f"/proc/{pid}/wchan", encoding="ascii") as handle:
        return "fanotify" in handle.read()


def test_when_naming_fails_the_other_openers_of_the_batch_go_on_too(traced: Path) -> None:
    def failing_namer(pid: int, *, budget_ns: int) -> ProcessName:
        raise RuntimeError("naming broke")

    gate = threading.Event()
    with running(traced, failing_namer, gate) as run:
        cats = [subprocess.Popen(["cat", str(traced / "file")], stdout=subprocess.PIPE) for _ in range(2)]
        deadline = time.monotonic() + 10
        # A precondition, not a retry: both must be queued so the holder reads them in one batch.
        while not all(_waiting_in_open(cat.pid) for cat in cats):
            assert time.monotonic() < deadline, "the cats never reached their open"
            time.sleep(0.01)
        gate.set()
        outputs = [cat.communicate(timeout=10) for cat in cats]
        run.stop()
    assert outputs == [(b"data", None), (b"data", None)]
    assert isinstance(run.error, RuntimeError)


def _event(mask: int, fd: int, pid: int) -> bytes:
    return _METADATA.pack(_METADATA.size, 3, 0, _METADATA.size, mask, fd, pid)


def test_a_pid_that_returns_after_its_process_exited_is_a_new_process(traced: Path) -> None:
    # pid_max can be 32768: over a long run a pid number comes back. Events are fed by hand (the
    # kernel cannot be made to reuse a pid on demand); the pidfd that sees the first one exit is real.
    names = iter(["first", "second"])
    group = open_group(permission=True)
    holder = Holder(group, [str(traced)], permission=True, own_pids=[],
                    namer=lambda pid, **_: ProcessName(next(names)))
    sleeper = subprocess.Popen(["sleep", "60"])
    pid = sleeper.pid

    def fd() -> int:
        return os.open(traced / "file", os.O_RDONLY)

    try:
        holder.handle(_event(FanMask.FAN_OPEN_PERM, fd(), pid) + _event(FanMask.FAN_OPEN, fd(), pid))
        holder.handle(_event(FanMask.FAN_OPEN_PERM, fd(), pid))  # alive: answered without naming
        sleeper.kill()
        sleeper.wait()
        holder.handle(_event(FanMask.FAN_ACCESS, fd(), pid)  # queued before the exit: still the first
                      + _event(FanMask.FAN_OPEN_PERM, fd(), pid) + _event(FanMask.FAN_OPEN, fd(), pid))
    finally:
        holder.close()
        os.close(group)
    found = [(p["executable"], p["events"]) for p in holder.report()["processes"] if p["pid"] == pid]
    assert found == [("first", 2), ("second", 1)]


def test_a_directory_read_before_the_first_held_open_is_the_same_process(traced: Path) -> None:
    # A process that opened a directory before tracing began reads it (FAN_ACCESS) and then opens a
    # file (held) in the same batch: one process, named while held, not a "late" twin.
    group = open_group(permission=True)
    holder = Holder(group, [str(traced)], permission=True, own_pids=[],
                    namer=lambda pid, **_: ProcessName("find"))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        holder.handle(_event(FanMask.FAN_ACCESS | FanMask.FAN_ONDIR, os.open(traced, os.O_RDONLY), sleeper.pid)
                      + _event(FanMask.FAN_OPEN_PERM, os.open(traced / "file", os.O_RDONLY), sleeper.pid)
                      + _event(FanMask.FAN_OPEN, os.open(traced / "file", os.O_RDONLY), sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
        holder.close()
        os.close(group)
    found = [(p["named"], p["events"]) for p in holder.report()["processes"] if p["pid"] == sleeper.pid]
    assert found == [("held", 2)]


def test_the_holder_opens_nothing_but_procfs_and_imports_nothing_while_it_holds(traced: Path) -> None:
    # On a mount that holds the holder's own files (the default base is often on /), an import or
    # an open of its own would wait for an answer only it could give.
    seen: list[tuple[str, str]] = []
    watching: list[int] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if watching and threading.get_ident() == watching[0] and event in ("open", "import"):
            seen.append((event, str(args[0])))

    sys.addaudithook(hook)

    def namer(pid: int, *, budget_ns: int) -> ProcessName:
        return name_process(pid, budget_ns=budget_ns)

    with running(traced, namer) as run:
        watching.append(run._thread.ident or 0)
        subprocess.run(["sh", "-c", f"cat '{traced}/file' > /dev/null"], check=True, timeout=30)
        report = run.stop()
        watching.clear()
    assert report["hold"]["named_while_held"] == 1
    assert [item for item in seen if item[0] == "import"] == []
    assert {path.split("/")[1] for _, path in seen} <= {"proc"}
    assert seen  # the hook did watch: naming reads /proc

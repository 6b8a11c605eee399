"""Ctrl-C at any moment of the command, from its first line on, is one line on stderr and exit 130; under
``--json`` also one ``artifactkit.error/1`` document on stdout.

The command runs as a real process and gets a real SIGINT at points chosen by what it does, not by a clock: an
audit hook (:func:`sys.addaudithook`) in the child raises SIGINT at the N-th audited event (every import, open,
mkdir, flock, rename, ...), for N over its whole start-up and run. It runs what the console script pip writes
runs, under ``python -S`` with the package and its dependencies on ``PYTHONPATH``: what the interpreter does
before our first line (``site`` running an installation's ``.pth`` files, e.g. the editable finder's 0.1 s
here) is Python's own start-up, which no package can change.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import select
import shutil
import signal
import site
import subprocess
import sys
from pathlib import Path

import pytest

import artifactkit
from artifactkit.cli import common, entry
from artifactkit.cli import main as cli_main
from artifactkit.cli.common import EXIT_INTERRUPTED
from artifactkit.cli.result import interrupted, render
from artifactkit.conformance.corpus import materialize
from artifactkit.store.locks import store_lock
from artifactkit.store.store import Store
from artifactkit.store.store_dirs import opened_store

LINE = "artifactkit: error: interrupted"


def _env() -> dict[str, str]:
    package_root = str(Path(artifactkit.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, *site.getsitepackages()])}


#: The console script (``from artifactkit.cli.entry import run``; ``sys.exit(run())``) with an audit hook
#: installed once entry.py's first lines have run, so the count starts where the package's Ctrl-C handling
#: does. At the event numbered ``ARTIFACTKIT_TEST_SIGINT_AT`` the process sends itself SIGINT (``raise_signal``:
#: the handler runs right there, as for a Ctrl-C arriving at that instant); at 0 it only records what happens.
#: Python audits no write to stdout, and the moment just after the result is out is one to test (a second
#: document could come there): stdout is wrapped to audit its writes and flushes as ``stdout.write`` and
#: ``stdout.flush`` events. At the end the script writes one line per event to the fd in
#: ``ARTIFACTKIT_TEST_EVENTS_FD``: the event's name and who handled SIGINT at that moment ("entry" while entry.py's
#: start-up handler did, else "python": the command's, which raises ``KeyboardInterrupt`` as Python's does).
#: ``posix``, ``_signal`` and ``sys`` are built in, so the hook itself
#: imports nothing the command would otherwise import.
SWEEP_SCRIPT = """import sys
from artifactkit.cli import entry as _entry
from artifactkit.cli.entry import run
import _signal, posix
_at, _events = int(posix.environ[b"ARTIFACTKIT_TEST_SIGINT_AT"]), []
def _hook(event, args):
    if _at < 0:
        return
    python = _signal.getsignal(_signal.SIGINT) is not _entry._interrupted_while_starting
    _events.append(event + (" python" if python else " entry"))
    if len(_events) == _at:
        _signal.raise_signal(_signal.SIGINT)
class _AuditedStdout:
    def __init__(self, stream):
        self._stream = stream
    def __getattr__(self, name):
        return getattr(self._stream, name)
    def write(self, text):
        written = self._stream.write(text)
        sys.audit("stdout.write")
        return written
    def flush(self):
        self._stream.flush()
        sys.audit("stdout.flush")
sys.stdout = _AuditedStdout(sys.stdout)
sys.addaudithook(_hook)
code = run()
_at = -1
posix.write(int(posix.environ[b"ARTIFACTKIT_TEST_EVENTS_FD"]), "\\n".join(_events).encode())
sys.exit(code)
"""


def _sweep_run(at: int, argv: list[str], env: dict[str, str]) -> tuple[int, str, str, list[str]]:
    """One run of the command, SIGINT at event ``at`` (0: none); (exit code, stdout, stderr, events seen)."""
    events_read, events_write = os.pipe()
    with os.fdopen(events_read, "rb") as events:
        process = subprocess.Popen(
            [sys.executable, "-S", "-c", SWEEP_SCRIPT, *argv], pass_fds=(events_write,), text=True,
            env={**env, "ARTIFACTKIT_TEST_SIGINT_AT": str(at), "ARTIFACTKIT_TEST_EVENTS_FD": str(events_write)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(events_write)
        # A bound on a hang, not a delay: an interrupted command ends in milliseconds.
        out, err = process.communicate(timeout=120)
        return process.returncode, out, err, events.read().decode().split("\n")


def _points(events: list[str]) -> list[int]:
    """Where to interrupt (1-based event numbers): 8 spread evenly over the start-up (entry.py's handler in
    charge: all alike, and cheap to reach), and in the run (Python's handler: a KeyboardInterrupt that every
    ``finally`` sees) the first event of each kind, the named points of a publish: the first import of the
    command's lazily imported modules, the first listing and xattr read of the scan, the first mkdir (the
    staging), the first lock, the first rename (a blob into place), the staging's removal, the first write of
    the result; and the run's last event, just after the result is out. (Each run costs a whole start-up:
    every event of the run would take minutes.)"""
    start_up = [number for number, event in enumerate(events, 1) if event.endswith(" entry")]
    firsts: dict[str, int] = {}
    for number, event in enumerate(events, 1):
        if event.endswith(" python"):
            firsts.setdefault(event.split()[0], number)
    spread = {start_up[i * (len(start_up) - 1) // 7] for i in range(8)} if start_up else set()
    return sorted(spread | set(firsts.values()) | {len(events)})


def test_ctrl_c_at_any_moment_of_start_up_and_run_is_one_line_and_exit_130(fast_tmp: Path) -> None:
    # Fixed: a hash seed (set iteration order) and one thread (on the native core; the reference is one process
    # anyway), so every run does the same in the same order.
    env = {**_env(), "PYTHONHASHSEED": "0"}
    materialize("basic", fast_tmp / "src")
    Store(fast_tmp / "template").publish(fast_tmp / "src", "demo")
    (fast_tmp / "src" / "new").write_text("content the store has not seen: a blob to stage\n")

    def interrupted_at(at: int, json_output: bool) -> tuple[int, str, str, list[str], Path]:
        store = fast_tmp / f"store-{'json' if json_output else 'text'}-{at}"  # each run a store of its own
        shutil.copytree(fast_tmp / "template", store, symlinks=True)
        argv = ["publish", str(fast_tmp / "src"), "--store", str(store), "--name", "demo", "--workers", "1"]
        return (*_sweep_run(at, [*argv, "--json"] if json_output else argv, env), store)

    runs, seen = [], {}
    for json_output in (False, True):
        # A first run writes the bytecode of every module the command imports (where the checkout is writable):
        # the calibration and every run after it import alike, event for event. Without it, a fresh clone's
        # calibration counted the .pyc writes that no later run made, and a point near the end never came (CI).
        warm = fast_tmp / f"store-warm-up-{json_output}"
        shutil.copytree(fast_tmp / "template", warm, symlinks=True)
        _sweep_run(0, ["publish", str(fast_tmp / "src"), "--store", str(warm), "--name", "demo", "--workers", "1",
                       *(["--json"] if json_output else [])], env)
        code, _, err, events, _ = interrupted_at(0, json_output)
        assert code == 0 and len(events) > 500, (err, events)  # the full start-up and publish, uninterrupted
        seen[json_output] = events
        # Each mode takes every other point: together they take all of them, in half the runs. Both take the
        # last, where the result is rendered and a second document could come.
        points = _points(events)
        # Inside the staging's removal too: its listing and its rmdir (remove_tree's; the first of each in the run).
        assert {events.index("os.scandir python") + 1, events.index("os.rmdir python") + 1} <= set(points)
        runs += [(at, json_output) for rank, at in enumerate(points) if rank % 2 == json_output or at == len(events)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # each run is its own process and its own store
        outcomes = list(pool.map(lambda run: (*run, *interrupted_at(*run)), runs))
    for at, json_output, code, out, err, events, store in outcomes:
        where = f"SIGINT at event {at} ({seen[json_output][at - 1]}{', --json' if json_output else ''})"
        assert (code, err) == (EXIT_INTERRUPTED, LINE + "\n"), \
            f"{where}: exit {code}, stderr {err!r}; {len(events)} events seen, {len(seen[json_output])} calibrated"
        # Interrupted before the result was out: nothing, or under --json the interrupt's document; while or
        # after it was written: the result, whole (json.loads takes exactly one document, nothing after it).
        if json_output:
            assert json.loads(out) == interrupted().document or json.loads(out)["schema"] == "artifactkit.publish/1", \
                f"{where}: stdout {out!r}"
        else:
            assert out in ("", "published demo@2", "published demo@2\n") or out.startswith("published demo@2 "), \
                f"{where}: stdout {out!r}"
        assert [ref.version for ref in Store(store).list()] in ([1], [1, 2]), where
        report, left = Store(store).verify(), os.listdir(store / "staging")
        assert report.ok, f"{where}: {report}"
        # Also when interrupted inside the removal of the staging itself (local_backend finishes it first).
        assert left == [], f"{where}: the interrupted publish left its staging"
    handlers = {seen[json_output][at - 1].split()[1] for at, json_output in runs}
    assert handlers == {"entry", "python"}, "both the start-up handler and Python's were interrupted"


def test_the_start_up_handler_says_what_main_says() -> None:
    assert entry._EXIT_INTERRUPTED == EXIT_INTERRUPTED
    assert entry._LINE.decode().rstrip("\n") == LINE


@pytest.mark.parametrize("module", ["artifactkit.cli.main", "artifactkit.cli.common", "argparse"])
def test_the_entry_module_imports_nothing_that_takes_time(module: str) -> None:
    code = f"import sys; import artifactkit.cli.entry; print({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-S", "-c", code], env=_env(), capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


#: The console script with one hook: it writes a byte to the fd in ``ARTIFACTKIT_TEST_READY_FD`` whenever the
#: command is about to wait for a lock, so the test interrupts it exactly there (no sleep, no guessed delay).
HOOKED_SCRIPT = """import fcntl, os, sys
from artifactkit.cli.entry import run
_flock, _ready = fcntl.flock, int(os.environ["ARTIFACTKIT_TEST_READY_FD"])
def flock(fd, operation):
    if not operation & fcntl.LOCK_NB:
        os.write(_ready, b"w")
    return _flock(fd, operation)
fcntl.flock = flock
sys.exit(run())
"""


def _interrupted_while_waiting(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI until it waits for a lock, Ctrl-C it there; (exit code, stdout, stderr)."""
    ready_read, ready_write = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-c", HOOKED_SCRIPT, *argv], pass_fds=(ready_write,),
                                   env={**os.environ, "ARTIFACTKIT_TEST_READY_FD": str(ready_write)},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.close(ready_write)
        ready_write = -1
        # A bound on a hang, not a delay: the byte comes as soon as the command asks for the lock.
        assert select.select([ready_read], [], [], 60)[0], "the command never asked for a lock"
        assert os.read(ready_read, 1) == b"w", "the command ended without waiting for a lock"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        return process.returncode, out, err
    finally:
        os.close(ready_read)
        if ready_write >= 0:
            os.close(ready_write)


@pytest.mark.parametrize("command", ["publish", "gc"])
def test_ctrl_c_under_json_is_one_line_exit_130_and_one_error_document(fast_tmp: Path, command: str) -> None:
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    store.publish(fast_tmp / "src", "demo")
    argv = {"publish": ["publish", str(fast_tmp / "src"), "--name", "demo"], "gc": ["gc"]}[command]
    with opened_store(store.layout) as dirs, store_lock(dirs.locks, exclusive=True, where="test"):
        code, out, err = _interrupted_while_waiting([*argv, "--store", str(fast_tmp / "store"), "--json"])
    assert (code, err) == (EXIT_INTERRUPTED, LINE + "\n")
    doc = json.loads(out)
    assert doc == {"schema": "artifactkit.error/1", "type": "KeyboardInterrupt", "message": "interrupted",
                   "exit_code": EXIT_INTERRUPTED, "fields": {}}
    assert os.listdir(fast_tmp / "store" / "staging") == [] and [ref.version for ref in store.list()] == [1]


def test_ctrl_c_under_json_before_main_runs_prints_the_same_document() -> None:
    """The start-up handler (entry.py's first line, before argparse is imported) prints it too."""
    code = ("import artifactkit.cli.entry, os, signal; os.kill(os.getpid(), signal.SIGINT); "
            "raise SystemExit('the handler did not end the process')")
    done = subprocess.run([sys.executable, "-S", "-c", code, "ls", "--store", "s", "--json"], env=_env(),
                          capture_output=True, text=True, check=False, timeout=60)
    assert (done.returncode, done.stderr) == (EXIT_INTERRUPTED, LINE + "\n")
    assert json.loads(done.stdout)["type"] == "KeyboardInterrupt"
    without = subprocess.run([sys.executable, "-S", "-c", code, "ls", "--store", "s"], env=_env(),
                             capture_output=True, text=True, check=False, timeout=60)
    assert (without.returncode, without.stdout, without.stderr) == (EXIT_INTERRUPTED, "", LINE + "\n")


def test_the_start_up_document_is_byte_for_byte_what_main_renders(capsys: pytest.CaptureFixture[str]) -> None:
    assert render(interrupted(), json_output=True) == EXIT_INTERRUPTED
    assert capsys.readouterr().out == entry._JSON.decode()


def test_ctrl_c_that_escapes_main_still_prints_one_document(monkeypatch: pytest.MonkeyPatch,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """Between main's return (or inside its own handler) and the console script's exit."""
    def escapes(argv: object, *, on_parsed: object = None, on_interrupted: object = None) -> int:
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_main, "main", escapes)
    monkeypatch.setattr(sys, "argv", ["artifactkit", "ls", "--store", "s", "--json"])
    monkeypatch.setattr(common, "_DOCUMENTS_WRITTEN", 0)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert entry.run() == EXIT_INTERRUPTED
    finally:  # run ends by ignoring SIGINT, as the console script's process does until it exits
        signal.signal(signal.SIGINT, previous)
    captured = capfd.readouterr()
    assert captured.err == LINE + "\n" and json.loads(captured.out)["type"] == "KeyboardInterrupt"

"""Ctrl-C at any moment of the command, from its first line on, is one line on stderr and exit 130; under
``--json`` also one ``artifactkit.error/1`` document on stdout.

The command runs as a real process and gets a real SIGINT at delays spread over its whole start-up and run.
It runs the console script pip writes, under ``python -S`` with the package and its dependencies on
``PYTHONPATH``: what the interpreter does before our first line (``site`` running an installation's ``.pth``
files, e.g. the editable finder's 0.1 s here) is Python's own start-up, which no package can change.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import site
import subprocess
import sys
import time
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


#: What pip writes as the ``artifactkit`` console script for ``artifactkit.cli.entry:run``.
CONSOLE_SCRIPT = """import sys
from artifactkit.cli.entry import run
if __name__ == "__main__":
    sys.exit(run())
"""


def _env() -> dict[str, str]:
    package_root = str(Path(artifactkit.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, *site.getsitepackages()])}


def _interrupted_after(delay_s: float, script: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    process = subprocess.Popen([sys.executable, "-S", str(script), *argv], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=SWALLOWED_AFTER_S)
    except subprocess.TimeoutExpired:
        # Still waiting for the lock: the signal was dropped (see _swallowed_by_python). A person presses
        # Ctrl-C again; the test too, and then checks where the first one went.
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        return SWALLOWED, err
    return process.returncode, err


#: An interrupted publish ends in milliseconds; one still waiting for its lock after this never got the signal.
SWALLOWED_AFTER_S = 10
SWALLOWED = -1000


#: How Python reports a ``KeyboardInterrupt`` it dropped while starting (and then went on): in importlib's
#: weakref callback, and in the interpreter's own check of the script's path (seen on main: 3 runs in 6 had
#: one, at 10-36 ms, in frozen zipimport/importlib frames).
_DROPPED_BY_PYTHON = ("Exception ignored in: <function _get_module_lock.",
                      "Failed checking if argv[0] is an import path entry")


def _swallowed_by_python(err: str) -> bool:
    """Whether the first SIGINT landed in Python's start-up before our first line ran, where Python reports
    and drops the ``KeyboardInterrupt`` (only frozen frames), and the second one got our line. entry.py's
    handler ends the process itself, so after its first line this cannot happen."""
    if not err.endswith(LINE + "\n"):
        return False
    head = err.removesuffix(LINE + "\n")
    frames = re.findall(r'^  File "([^"]+)", line \d+', head, flags=re.MULTILINE)
    return (head.startswith(_DROPPED_BY_PYTHON) and _ends_in_keyboard_interrupt(head)
            and all(frame.startswith("<frozen ") for frame in frames))


def _ends_in_keyboard_interrupt(text: str) -> bool:
    # "KeyboardInterrupt: " (an empty message) too: seen at 14 ms, after "python: failed to set
    # __main__.__loader__", the interpreter's own line while it sets up the script's module.
    return text.rstrip().removesuffix(":").endswith("KeyboardInterrupt")


#: entry.py's first line that does anything: a SIGINT pending when it runs is raised there, before it installs.
_INSTALL = "_signal.signal(_signal.SIGINT, _interrupted_while_starting)"


def _before_our_first_line(err: str) -> bool:
    """Whether ``err`` is Python's own traceback of a SIGINT that landed in the interpreter's start-up or in its
    import machinery locating or loading ``artifactkit.cli.entry``, before its first line ran (or raised on that
    line itself, the handler not yet in place), never in another line of the package: once entry.py's first
    line has installed the handler, no ``KeyboardInterrupt`` reaches the top. (Before entry.py, the script
    imported the CLI first: frames of main.py, argparse.)
    """
    frames = re.findall(r'^  File "([^"]+)", line \d+.*\n(?:    (.*)\n)?', err, flags=re.MULTILINE)
    ours = [(frame, line.strip()) for frame, line in frames if frame.startswith(_PACKAGE)]
    return (_ends_in_keyboard_interrupt(err) and ours in ([], [(entry.__file__, _INSTALL)])
            and all(frame.startswith(("<frozen ", _PACKAGE)) or frame.endswith("console-script")
                    for frame, _ in frames))


_PACKAGE = str(Path(artifactkit.__file__).parent)
#: 2 ms apart over the start-up (about 20-40 ms under ``-S``), then into the command's wait for the lock.
DELAYS_MS = [*range(0, 60, 2), *range(80, 320, 40)]


def test_ctrl_c_at_any_moment_of_start_up_and_run_is_one_line_and_exit_130(fast_tmp: Path) -> None:
    env = _env()
    script = fast_tmp / "console-script"
    script.write_text(CONSOLE_SCRIPT)
    materialize("basic", fast_tmp / "src")
    store = Store(fast_tmp / "store")
    store.publish(fast_tmp / "src", "demo")
    argv = ["publish", str(fast_tmp / "src"), "--store", str(fast_tmp / "store"), "--name", "demo"]
    # gc's exclusive lock, held here: the publish waits for it until the signal comes, however fast it starts.
    with opened_store(store.layout) as dirs, store_lock(dirs.locks, exclusive=True, where="test"):
        outcomes = [(delay, *_interrupted_after(delay / 1000, script, argv, env)) for delay in DELAYS_MS]
    for delay_ms, code, err in outcomes:
        # Our one line and 130; or the signal came before our first line ran: killed before Python installed
        # its handler (nothing printed; a shell reports 130 too), or Python's own start-up traceback (exit 1
        # while the interpreter initializes, killed by SIGINT once it runs the script).
        assert (code == EXIT_INTERRUPTED and err == LINE + "\n") \
            or (code == -signal.SIGINT and err == "") \
            or (code in (1, -signal.SIGINT) and _before_our_first_line(err)) \
            or (code == SWALLOWED and _swallowed_by_python(err)), \
            f"SIGINT after {delay_ms} ms: exit {code}, stderr {err!r}"
    assert sum(code == EXIT_INTERRUPTED for _, code, _ in outcomes) >= len(outcomes) // 2, outcomes
    assert os.listdir(fast_tmp / "store" / "staging") == [], "every interrupted publish cleaned up"
    assert [ref.version for ref in store.list()] == [1]


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
    def escapes(argv: object, *, on_parsed: object = None) -> int:
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_main, "main", escapes)
    monkeypatch.setattr(sys, "argv", ["artifactkit", "ls", "--store", "s", "--json"])
    monkeypatch.setattr(common, "_DOCUMENTS_WRITTEN", 0)
    assert entry.run() == EXIT_INTERRUPTED
    captured = capfd.readouterr()
    assert captured.err == LINE + "\n" and json.loads(captured.out)["type"] == "KeyboardInterrupt"

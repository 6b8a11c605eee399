"""Ctrl-C at any moment of the command, from its first line on, is one line on stderr and exit 130.

The command runs as a real process and gets a real SIGINT at delays spread over its whole start-up and run.
It runs the console script pip writes, under ``python -S`` with the package and its dependencies on
``PYTHONPATH``: what the interpreter does before our first line (``site`` running an installation's ``.pth``
files, e.g. the editable finder's 0.1 s here) is Python's own start-up, which no package can change.
"""

from __future__ import annotations

import os
import re
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

import artifactkit
from artifactkit.cli import entry
from artifactkit.cli.common import EXIT_INTERRUPTED
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


def _swallowed_by_python(err: str) -> bool:
    """Whether the first SIGINT landed in importlib's weakref callback before our first line ran, where Python
    prints "Exception ignored" and drops the ``KeyboardInterrupt`` (only frozen import frames), and the second
    one got our line. entry.py's handler ends the process itself, so after its first line this cannot happen."""
    head, _, tail = err.partition("KeyboardInterrupt: \n")
    frames = re.findall(r'^  File "([^"]+)", line \d+', head, flags=re.MULTILINE)
    return (head.startswith("Exception ignored in: <function _get_module_lock.") and tail == LINE + "\n"
            and all(frame.startswith("<frozen importlib.") for frame in frames))


def _before_our_first_line(err: str) -> bool:
    """Whether ``err`` is Python's own traceback of a SIGINT that landed in the interpreter's start-up or in its
    import machinery locating or loading ``artifactkit.cli.entry``, before its first line ran, never in a
    line of the package: entry.py's first line installs the handler, after which no ``KeyboardInterrupt``
    reaches the top. (Before entry.py, the script imported the CLI first: frames of main.py, argparse.)
    """
    frames = re.findall(r'^  File "([^"]+)", line \d+', err, flags=re.MULTILINE)
    return (err.rstrip().endswith("KeyboardInterrupt")
            and not any(frame.startswith(_PACKAGE) for frame in frames)
            and all(frame.startswith("<frozen ") or frame.endswith("console-script") for frame in frames))


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

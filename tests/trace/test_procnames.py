"""Naming a process from /proc: executable, command line, parents; a budget; the exited."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from artifactkit.trace.procnames import UNKNOWN_EXITED, executable, name_process

SELF_EXE = os.path.basename(os.readlink("/proc/self/exe"))
PLENTY_NS = 1_000_000_000


#: A child that says it runs, then waits. Popen returns once the exec has begun, but /proc/PID/cmdline stays
#: empty until the kernel has laid out the new program's arguments (CI once read ``()`` for a plain
#: ``sleep 60``): the line it writes is the condition that it is past that point, not a delay.
_CHILD = "import sys, time; sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)"


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc.pid
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_a_running_process_is_named_with_its_command_line_and_parents(sleeper: int) -> None:
    name = name_process(sleeper, budget_ns=PLENTY_NS)
    assert name.executable == SELF_EXE  # the same interpreter as this test
    assert name.argv == (sys.executable, "-c", _CHILD)
    assert name.chain[-1] == SELF_EXE  # its parent is this test
    assert name.complete


def test_the_chain_stops_at_its_depth_or_at_pid_1(sleeper: int) -> None:
    assert name_process(sleeper, budget_ns=PLENTY_NS, max_depth=1).chain == (SELF_EXE,)
    assert name_process(1, budget_ns=PLENTY_NS).chain == ()


def test_a_spent_budget_keeps_the_executable_and_says_it_is_incomplete(sleeper: int) -> None:
    name = name_process(sleeper, budget_ns=0)
    assert (name.executable, name.chain, name.argv, name.complete) == (SELF_EXE, (), (), False)


def test_a_process_gone_before_it_was_read_is_unknown_exited() -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(proc.stdout)
    assert executable(pid) == UNKNOWN_EXITED
    assert name_process(pid, budget_ns=PLENTY_NS).executable == UNKNOWN_EXITED


def test_a_zombie_keeps_its_kernel_name() -> None:
    proc = subprocess.Popen(["true"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: no exe, still a comm
    try:
        assert executable(proc.pid) == "true"
    finally:
        proc.wait()

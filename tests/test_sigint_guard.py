"""The suite's own guard: a test that leaves SIGINT ignored (as the console script's ``run`` does on its way
out) fails, and the worker gets its handler back, so the children later tests start still stop on Ctrl-C."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LEAVES_IT_IGNORED = """
import signal, subprocess, sys

def test_leaves_sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_a_later_child_still_stops_on_ctrl_c():
    child = subprocess.Popen([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
                             stdout=subprocess.PIPE, text=True)
    assert child.communicate(timeout=60)[0].strip() == "<built-in function default_int_handler>"
"""


def test_a_test_that_leaves_sigint_ignored_fails_and_the_next_child_is_interruptible(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest("from tests.conftest import sigint_given_back  # noqa: F401\n")
    pytester.makepyfile(test_signals=LEAVES_IT_IGNORED)
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the test left SIGINT handled by <Handlers.SIG_IGN*"])

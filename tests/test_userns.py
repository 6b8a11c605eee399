"""tests/support/userns.py: who gets re-run in a user namespace, and what the namespace run can do.

The decision is a pure function, tested case by case. The end-to-end test runs a one-test project
in a subprocess as a non-root user (``nobody`` via ``setpriv`` when we are real root), which must
be re-executed with CapEff = CAP_SYS_ADMIN only, and whose capability probes must answer "mount
yes; loop devices, fanotify, reading a mode-000 file no".
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from artifactkit.conformance.corpus import can_read_unreadable
from tests.support import capability, userns

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


def never_probed() -> str | None:
    raise AssertionError("the unshare probe ran although a cheaper check had already said no")


def decide(euid: int = 1000, environ: dict[str, str] | None = None, *, from_command_line: bool = True,
           probe: Callable[[], str | None] = lambda: None) -> userns.Decision:
    return userns.decide(euid=euid, environ=environ or {}, from_command_line=from_command_line, probe=probe)


def test_a_normal_user_on_the_command_line_with_working_unshare_is_re_executed() -> None:
    assert decide().reexec


def test_root_is_not_re_executed_and_unshare_is_not_even_tried() -> None:
    assert decide(euid=0, probe=never_probed) == userns.Decision(
        reexec=False, reason="running as root: real mounts, nothing to gain")


def test_the_marker_stops_a_second_re_exec_even_though_the_namespace_makes_euid_0() -> None:
    decision = decide(euid=0, environ={userns.INSIDE: "1"}, probe=never_probed)
    assert not decision.reexec and "already re-executed" in decision.reason


def test_artifactkit_userns_0_opts_out_and_other_values_do_not() -> None:
    decision = decide(environ={userns.OPT_OUT: "0"}, probe=never_probed)
    assert (decision.reexec, decision.reason) == (False, "ARTIFACTKIT_USERNS=0 opts out")
    assert decide(environ={userns.OPT_OUT: "1"}).reexec


def test_an_in_process_or_worker_session_is_not_re_executed() -> None:
    decision = decide(from_command_line=False, probe=never_probed)
    assert not decision.reexec and "pytester" in decision.reason


def test_unusable_unshare_is_not_re_executed_and_the_reason_says_what_failed() -> None:
    decision = decide(probe=lambda: "`unshare -Urm setpriv ... true` failed (rc 1: Operation not permitted)")
    assert not decision.reexec
    assert decision.reason.endswith("unusable here: `unshare -Urm setpriv ... true` failed (rc 1: Operation not "
                                    "permitted)")


def test_the_probe_names_the_missing_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert userns.probe_prefix() == "unshare and setpriv not on PATH (util-linux)"


def test_only_the_session_that_parses_sys_argv_counts_as_the_command_line() -> None:
    assert userns.from_command_line(["-n", "2"], ["/venv/bin/pytest", "-n", "2"])
    assert not userns.from_command_line(["-n", "2"], ["-c", "-n", "2"]), "an xdist worker is `python -c`"
    assert not userns.from_command_line(["--basetemp=/x", "t.py"], ["/venv/bin/pytest", "-n", "2"])
    assert not userns.from_command_line([], [])


def test_the_command_keeps_the_interpreter_its_flags_and_every_argument() -> None:
    assert userns.command("/venv/bin/python3", ["python", "-X", "dev", "-m", "pytest", "-n", "2", "a b"]) == [
        *userns.PREFIX, "/venv/bin/python3", "-X", "dev", "-m", "pytest", "-n", "2", "a b"]


def test_an_in_process_run_is_not_re_executed_and_says_so(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(userns.INSIDE, raising=False)
    monkeypatch.delenv(userns.OPT_OUT, raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "tests.support.userns")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["artifactkit userns: not re-executed: not a command-line session*"])


# -- end to end: a real non-root session ---------------------------------------------------------

def assert_an_unprivileged_namespace_session() -> None:
    """What the re-executed session must hold: the marker, CAP_SYS_ADMIN alone, and the probes' answers."""
    with open("/proc/self/status", encoding="ascii") as status:
        eff = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    assert os.environ.get(userns.INSIDE) == "1"
    assert eff == 1 << 21, f"CapEff {eff:#x}: only CAP_SYS_ADMIN, so no DAC override, CAP_FOWNER or CAP_CHOWN"
    assert capability.can_mount()
    assert not capability.can_attach_loop_devices()
    assert not capability.can_fanotify()
    assert not can_read_unreadable()


PROBE_TEST = """
from tests.test_userns import assert_an_unprivileged_namespace_session

def test_the_session_holds_only_what_an_unprivileged_namespace_gives():
    assert_an_unprivileged_namespace_session()
"""


def as_a_normal_user() -> list[str]:
    """The command prefix that makes a subprocess non-root: none, or ``setpriv`` to ``nobody`` from real root."""
    if os.geteuid() != 0 or capability.in_user_namespace():
        return []  # outside a namespace we are a normal user; inside one we hold no more than it gives
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all", "--"]
    # The interpreter itself, not the venv's symlink: root's Python may live under a 0700 /root.
    interpreter = os.path.realpath(sys.executable)
    if subprocess.run([*prefix, "test", "-x", interpreter], check=False).returncode != 0:
        pytest.skip(f"as root this needs a Python that nobody can run, and {interpreter} is not "
                    "(.ci/run's unprivileged runs cover this test)")
    return prefix


@pytest.fixture
def run_as_a_normal_user() -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """Runs ``python -m pytest`` with the plugin on a one-test project, as a normal user who owns it."""
    prefix = as_a_normal_user()
    project = Path(tempfile.mkdtemp(prefix="artifactkit-userns-"))  # pytest's tmp_path is private to us
    (project / "test_probe.py").write_text(PROBE_TEST)
    if prefix:
        for entry in (project, project / "test_probe.py"):
            os.chown(entry, NOBODY, NOBODY)
    try:
        yield functools.partial(_run, project, prefix)
    finally:
        shutil.rmtree(project)


def _run(project: Path, prefix: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (userns.INSIDE, userns.OPT_OUT)}
    clean |= {"PYTHONPATH": str(REPO), "HOME": str(project), **env}
    return subprocess.run([*prefix, sys.executable, "-m", "pytest", "-p", "tests.support.userns", "-p",
                           "no:cacheprovider", f"--basetemp={project}/tmp", "-rs"],
                          cwd=project, env=clean, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_a_normal_user_session_is_re_executed_with_cap_sys_admin_only(
        run_as_a_normal_user: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    if os.environ.get(userns.INSIDE):
        # This session is such a run; a nested namespace cannot drop to a non-root uid to start another
        # (writing its uid_map is refused without the capabilities we dropped), so check this one.
        assert_an_unprivileged_namespace_session()
        return
    result = run_as_a_normal_user()
    if "unusable here" in result.stdout:
        pytest.skip(f"unprivileged user namespaces are not available here: {result.stdout.splitlines()[:3]}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "artifactkit userns: re-executed under `unshare -Urm setpriv" in result.stdout
    assert "CapEff 0000000000200000" in result.stdout


def test_artifactkit_userns_0_keeps_the_session_outside_and_the_header_says_why(
        run_as_a_normal_user: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    result = run_as_a_normal_user(ARTIFACTKIT_USERNS="0")
    assert "artifactkit userns: not re-executed: ARTIFACTKIT_USERNS=0 opts out" in result.stdout
    assert result.returncode == 1, "outside a namespace the probe test must fail (no marker, no mount)"
    assert "1 failed" in result.stdout


def test_the_re_executed_suite_is_told_who_the_user_is_where_the_environment_does_not_say() -> None:
    # env -i (no USER): inside the namespace pytest would take the user for root and refuse /tmp/pytest-of-root.
    name = pwd.getpwuid(os.getuid()).pw_name
    assert userns.who_i_am({}, os.getuid()) == {"LOGNAME": name, "USER": name}
    assert userns.who_i_am({"LOGNAME": "me", "USER": "me"}, os.getuid()) == {}  # a login's own names are kept

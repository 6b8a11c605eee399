"""Re-run a non-root pytest session inside a user+mount namespace, keeping only CAP_SYS_ADMIN.

Loaded as ``-p tests.support.userns`` from addopts. Its ``pytest_load_initial_conftests`` wrapper is
``tryfirst``, so it runs in ``Config`` preparse *outside* the capture plugin's wrapper (fds 1/2 are
still the terminal) and long before pytest-xdist starts workers in ``pytest_sessionstart``. There it
``exec``\\s the very same command line as::

    unshare --user --map-root-user --mount --propagation private -- \\
        setpriv --inh-caps -all --bounding-set -all,+sys_admin -- python ARGS

The workers are children of that process and inherit the namespace; every mount dies with it, even
on SIGKILL. Why ``setpriv``: inside the namespace uid 0 holds every capability over what the
namespace owns, which includes the user's own files, so CAP_DAC_OVERRIDE would let a mode-000 file
be read and hide the DAC bugs a normal user hits. uid 0 gets ``permitted = inheritable | bounding``
at each ``exec``, so emptying the inheritable set and leaving only CAP_SYS_ADMIN in the bounding
set leaves ``CapEff`` = ``0x200000`` (checked in ``/proc/self/status`` by the tests): ``mount``
still works, permission checks are those of the user.

Never for root (it has the real thing), never twice (:data:`INSIDE`), never for pytester's
in-process runs or xdist workers (their arguments are not ``sys.argv``), and not with
``ARTIFACTKIT_USERNS=0``. The report header says which happened and why.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Generator, Mapping, Sequence

import attrs
import pytest

OPT_OUT = "ARTIFACTKIT_USERNS"
INSIDE = "ARTIFACTKIT_USERNS_INSIDE"

#: The command prefix; ``true`` after it is the probe, the session's own argv the real thing.
PREFIX = ("unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--",
          "setpriv", "--inh-caps", "-all", "--bounding-set", "-all,+sys_admin", "--")


@attrs.frozen
class Decision:
    """Whether to re-exec under :data:`PREFIX`, and the reason shown in the report header."""

    reexec: bool
    reason: str


def probe_prefix() -> str | None:
    """Run ``PREFIX true``: ``None`` when it works, else what went wrong (tool missing, refused)."""
    missing = [tool for tool in ("unshare", "setpriv") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (util-linux)"
    done = subprocess.run([*PREFIX, "true"], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    if done.returncode == 0:
        return None
    said = done.stderr.strip().splitlines()
    return f"`unshare -Urm setpriv ... true` failed (rc {done.returncode}: {said[-1] if said else 'no message'})"


def decide(*, euid: int, environ: Mapping[str, str], from_command_line: bool,
           probe: Callable[[], str | None]) -> Decision:
    """The whole policy, cheapest checks first; ``probe`` (a subprocess) runs only when all pass."""
    if environ.get(INSIDE):
        return Decision(reexec=False, reason=f"already re-executed ({INSIDE}=1): this is the namespace run")
    if environ.get(OPT_OUT, "") == "0":
        return Decision(reexec=False, reason=f"{OPT_OUT}=0 opts out")
    if euid == 0:
        return Decision(reexec=False, reason="running as root: real mounts, nothing to gain")
    if not from_command_line:
        return Decision(reexec=False, reason="not a command-line session (pytester in-process run or xdist worker)")
    trouble = probe()
    if trouble is not None:
        return Decision(reexec=False, reason=f"unprivileged user namespaces unusable here: {trouble}")
    return Decision(reexec=True, reason="not root and `unshare -Urm` works: mounting tmpfs/ramfs/overlay unprivileged")


def from_command_line(args: Sequence[str], argv: Sequence[str]) -> bool:
    """The session parses exactly ``sys.argv[1:]``: not ``pytest.main([...])``, not xdist's ``python -c``."""
    return bool(argv) and argv[0] != "-c" and list(args) == list(argv[1:])


def command(executable: str, orig_argv: Sequence[str]) -> list[str]:
    """What to exec: the same interpreter with the same flags and arguments, behind :data:`PREFIX`."""
    return [*PREFIX, executable, *orig_argv[1:]]


def capabilities() -> str:
    """``CapEff`` of this process, for the header (evidence, not trust in the command line)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return line.split()[1]
    return "unknown"


DECISION = pytest.StashKey[Decision]()


def who_i_am(environ: Mapping[str, str], uid: int) -> dict[str, str]:
    """``LOGNAME`` and ``USER`` for the re-executed suite where the environment lacks them (``env -i``, cron):
    inside the namespace the user is uid 0, so pytest would name its temporary root ``/tmp/pytest-of-root``
    and refuse it wherever the real root's exists (not owned by the current user)."""
    name = pwd.getpwuid(uid).pw_name
    return {var: name for var in ("LOGNAME", "USER") if not environ.get(var)}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None]:
    decision = decide(euid=os.geteuid(), environ=os.environ,
                      from_command_line=from_command_line(early_config.invocation_params.args, sys.argv),
                      probe=probe_prefix)
    early_config.stash[DECISION] = decision
    if decision.reexec:
        argv = command(sys.executable, sys.orig_argv)
        os.environ[INSIDE] = "1"
        os.environ.update(who_i_am(os.environ, os.getuid()))
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvp(argv[0], argv)  # noqa: S606 -- argv is our fixed prefix plus this very process's argv
    return (yield)


def pytest_report_header(config: pytest.Config) -> str:
    decision = config.stash.get(DECISION, None)
    if decision is None:
        return "artifactkit userns: plugin loaded too late to decide"
    if os.environ.get(INSIDE):
        with open("/proc/self/uid_map", encoding="ascii") as uid_map:
            mapping = " ".join(uid_map.read().split())
        return (f"artifactkit userns: re-executed under `unshare -Urm setpriv (CAP_SYS_ADMIN only)`: uid_map "
                f"{mapping}, CapEff {capabilities()} (opt out: {OPT_OUT}=0)")
    return f"artifactkit userns: not re-executed: {decision.reason}"

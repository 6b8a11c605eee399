"""README's test command as root on a machine without the packages ``.ci/run`` installs: each test that needs one
of their tools skips, naming the tool and how to install it, and none fails (issue 53, item 7: without Debian's
``pax`` a pinned-verdict test failed instead, and README said "as root everything runs").

The machine is this one with those packages' programs taken off ``PATH`` (each test finds its tool through
``PATH``, as the code under test does): a directory of links to every program on ``PATH`` but theirs, as
``dpkg -L`` lists them. The tests run are those that gate on such a tool: the adapters (zip, 7z, borg, bsdtar,
cpio, pax, rclone, restic, squashfs, bindfs), the EINTR shim's C compiler, the FUSE rows (fuse3, sshfs, ...).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.capability import REQUIRE_ENV, require_real_root

ROOT = Path(__file__).resolve().parent.parent
#: The packages ``.ci/run`` installs that a Debian base system lacks (e2fsprogs, util-linux, mount, tar, coreutils
#: and passwd it has); a test holds this to ``.ci/run``'s own list.
CI_PACKAGES = ("xfsprogs", "btrfs-progs", "rsync", "strace", "restic", "borgbackup", "rclone", "zip", "unzip", "git",
               "bindfs", "fuse3", "acl", "sshfs", "openssh-server", "s3fs", "mergerfs", "squashfuse", "cpio", "pax",
               "libarchive-tools", "squashfs-tools", "7zip", "gcc", "libc6-dev")
BASE_PACKAGES = ("e2fsprogs", "util-linux", "mount", "tar", "coreutils", "passwd")
#: The test modules that gate on one of their tools.
GATED = ("tests/conformance/test_adapters.py", "tests/store/test_eintr_retried.py", "tests/test_fs_matrix_fuse.py")


def _ci_packages() -> list[str]:
    text = (ROOT / ".ci" / "run").read_text()
    listed = re.search(r"apt-get install -y -qq --no-install-recommends \\\n(.*?)</dev/null", text, re.S)
    assert listed is not None, ".ci/run installs no packages the way this test reads"
    return listed.group(1).replace("\\", " ").split()


def test_the_packages_taken_away_are_what_ci_installs_beyond_a_base_system() -> None:
    assert sorted(CI_PACKAGES + BASE_PACKAGES) == sorted(_ci_packages())


def _path_without(packages: tuple[str, ...], into: Path) -> str:
    """A ``PATH`` of one directory: links to every program on this ``PATH`` that none of ``packages`` installed."""
    theirs = set()
    for package in packages:
        listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=False).stdout
        theirs.update(os.path.realpath(line) for line in listed.splitlines() if line)
    into.mkdir()
    for folder in [os.path.dirname(sys.executable), *os.environ["PATH"].split(os.pathsep)]:
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            program = os.path.join(folder, name)
            if (not os.path.lexists(into / name) and os.access(program, os.X_OK)
                    and os.path.realpath(program) not in theirs):
                os.symlink(program, into / name)
    return str(into)


def test_as_root_without_cis_packages_every_test_needing_their_tools_skips_naming_it(tmp_path: Path) -> None:
    require_real_root("run the tests as root")
    if shutil.which("dpkg") is None:
        pytest.skip("needs dpkg to know which programs Debian's packages installed")
    path = _path_without(CI_PACKAGES, tmp_path / "bin")
    assert not any(os.path.lexists(Path(path) / tool) for tool in ("pax", "rsync", "cc", "bindfs", "restic"))
    env = {key: value for key, value in os.environ.items() if key not in (REQUIRE_ENV, "PYTEST_XDIST_WORKER")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-n", "2", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *GATED], cwd=ROOT, env={**env, "PATH": path},
                          capture_output=True, text=True, check=False, timeout=900)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and "failed" not in summary and "error" not in summary, done.stdout[-3000:]
    reasons = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert reasons, summary
    assert all("install" in reason for reason in reasons), "\n".join(r for r in reasons if "install" not in r)

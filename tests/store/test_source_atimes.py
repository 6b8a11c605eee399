"""A publish counts the source atimes its reads moved, and why, on both engines alike: a symlink's by ``readlink``
(which takes no ``O_NOATIME``), and every file and directory a user who does not own them reads (``O_NOATIME`` is
refused to them). Issue 53 found both silent: 107 of 107 links of /usr/share/doc, and a non-owner's every atime.

Each atime is set 3 years back first, so that the mount's relatime (tmpfs's default) moves it on the next read,
whatever the clock's coarse ticks.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.cli.main import main
from artifactkit.errors import SourceAtimesMovedWarning
from artifactkit.store.source_atimes import MovedAtimes, moved_of
from tests.support.capability import require_real_root
from tests.support.engines import ENGINE_NAMES, running_on

NOBODY = 65534
LONG_AGO_NS = 1_700_000_000 * 10**9


def _aged(root: Path) -> None:
    """Every atime of the tree far in the past (mtimes kept), links' own included."""
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        os.utime(path, ns=(LONG_AGO_NS, st.st_mtime_ns), follow_symlinks=False)


#: The tree of :func:`_tree`, so as to look at its atimes without listing it (which moves them).
PATHS = ("", "sub", "a", "b", "sub/c", "link", "sub/link")


def _atimes_moved(root: Path) -> list[str]:
    return [path for path in PATHS if (root / path).lstat().st_atime_ns != LONG_AGO_NS]


def _tree(root: Path) -> Path:
    """Two directories, three files, two symlinks."""
    (root / "sub").mkdir(parents=True)
    for name in ("a", "b", "sub/c"):
        (root / name).write_text(f"{name}\n")
    os.symlink("a", root / "link")
    os.symlink("../b", root / "sub" / "link")
    _aged(root)
    return root


def _published(src: Path, store: Path) -> list[SourceAtimesMovedWarning]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Store(store).publish(src, "demo")
    return [w.message for w in caught if isinstance(w.message, SourceAtimesMovedWarning)]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_publish_counts_the_symlink_atimes_readlink_moved(fast_tmp: Path, engine: str) -> None:
    src = _tree(fast_tmp / "src")
    with running_on(engine):
        warned = _published(src, fast_tmp / "store")
    assert [(w.symlinks, w.files, w.directories, w.total) for w in warned] == [(2, 0, 0, 2)]
    assert str(warned[0]) == "publish moved 2 source atime(s): 2 symlink(s) read by readlink"
    # The count is what is: both links' atimes did move, and nothing else's.
    assert _atimes_moved(src) == ["link", "sub/link"]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_publish_that_moved_no_atime_warns_nothing(fast_tmp: Path, engine: str) -> None:
    src = fast_tmp / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("x\n")
    _aged(src)
    with running_on(engine):
        assert _published(src, fast_tmp / "store") == []


def test_the_warning_pickles_with_its_counts() -> None:
    warned = MovedAtimes(symlinks=1, files=2, directories=3).warning()
    again = pickle.loads(pickle.dumps(warned))
    assert (again.symlinks, again.files, again.directories, again.total, str(again)) == (1, 2, 3, 6, str(warned))
    assert moved_of([warned, UserWarning("other")]) == MovedAtimes(1, 2, 3)
    assert moved_of([]) == MovedAtimes(0, 0, 0)


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """root's tree (two directories, three files, two links) where every user may read it."""
    require_real_root("publishing as another user (setuid to nobody)")
    base = Path(tempfile.mkdtemp(prefix="artifactkit-atimes-", dir="/dev/shm"))
    base.chmod(0o755)
    src = base / "src"
    _tree(src)
    for path in [src, *src.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    _aged(src)
    store = base / "store"
    store.mkdir()
    os.chown(store, NOBODY, NOBODY)
    yield src
    shutil.rmtree(base)


def _published_as_nobody(src: Path, store: Path) -> list[tuple[int, int, int]]:
    """What a child running as ``nobody`` was warned of publishing ``src`` into ``store``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            found: object = [(w.symlinks, w.files, w.directories) for w in _published(src, store)]
        except BaseException as err:  # noqa: BLE001 - reported to the parent, which fails on it
            found = repr(err)
        os.write(write_end, pickle.dumps(found))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        found = pickle.loads(reader.read())
    os.waitpid(pid, 0)
    assert isinstance(found, list), found
    return found


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_publish_by_a_user_who_does_not_own_the_source_counts_every_atime_it_moved(
        shared_tree: Path, engine: str) -> None:
    with running_on(engine):
        warned = _published_as_nobody(shared_tree, shared_tree.parent / "store")
    # O_NOATIME refused on every file and directory: each read and each listing moved its atime.
    assert warned == [(2, 3, 2)]
    assert _atimes_moved(shared_tree) == list(PATHS)


def test_the_cli_reports_the_moved_atimes_in_text_and_json(fast_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(fast_tmp / "src")
    assert main(["publish", str(src), "--store", str(fast_tmp / "store"), "--name", "demo", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source_atimes_moved"] == {"symlinks": 2, "files": 0, "directories": 0, "total": 2}
    _aged(src)
    assert main(["publish", str(src), "--store", str(fast_tmp / "store"), "--name", "demo"]) == 0
    assert capsys.readouterr().out.strip().endswith("; moved 2 source atime(s): 2 symlink(s) read by readlink")
    os.unlink(src / "link")
    os.unlink(src / "sub" / "link")
    assert main(["publish", str(src), "--store", str(fast_tmp / "store"), "--name", "demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_atimes_moved"] == {
        "symlinks": 0, "files": 0, "directories": 0, "total": 0}


def test_counting_makes_no_file_meta_of_every_entry(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Indexing the core's captured tree makes every entry's FileMeta at once: 0.3-2 s and their memory for 100,000.
    from artifactkit.engine.native_values import CapturedEntries

    def refused(self: object) -> tuple[object, ...]:
        raise AssertionError("every entry made as a FileMeta")

    src = _tree(fast_tmp / "src")
    monkeypatch.setattr(CapturedEntries, "_make", refused)
    with running_on("native"):
        warned = _published(src, fast_tmp / "store")
    assert [w.total for w in warned] == [2]

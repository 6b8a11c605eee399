"""A writer of the store swaps its layout: nothing outside the store or the destination is ever touched.

The attacker can write the store (a shared team directory), not the victim's machine: it replaces
``blobs/``, ``staging/``, ``locks/``, ``manifests/`` or ``manifests/<name>`` by a symlink to a directory of
the victim's (a canary here), or by a directory of its own. Every operation must refuse with
:class:`UnsafeStoreError` naming it, or go on unharmed; the canary never changes. The race tests swap the
directory in a loop while the operation runs 200 times.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.conformance.corpus import materialize
from artifactkit.errors import IntegrityError, NotAStoreError, UnsafeStoreError
from tests.support.capability import require_real_root
from tests.support.crash import snapshot

LAYOUT = ("blobs", "staging", "locks", "manifests")
RACE_RUNS = 200


@pytest.fixture
def site(fast_tmp: Path) -> Path:
    """A store with ``demo@1`` of the ``basic`` tree, and a ``canary`` dir of the victim's with a file in it."""
    materialize("basic", fast_tmp / "src")
    Store(fast_tmp / "store").publish(fast_tmp / "src", "demo")
    (fast_tmp / "canary").mkdir()
    (fast_tmp / "canary" / "precious.txt").write_text("the victim's own file\n")
    (fast_tmp / "work").mkdir()
    return fast_tmp


def _swap_for_link(site: Path, layout_dir: str) -> None:
    """What the attacker does: the layout dir moved aside, a symlink to the victim's canary in its place."""
    real = site / "store" / layout_dir
    real.rename(site / f"moved-{real.name}")  # out of the store: not a version of another name
    real.symlink_to(site / "canary")


OPERATIONS: dict[str, Callable[[Store, Path], object]] = {
    "gc": lambda store, site: store.gc(),
    "publish": lambda store, site: store.publish(site / "src", "demo"),
    "verify": lambda store, site: store.verify(),
    "ls": lambda store, site: store.list(),
    "download": lambda store, site: store.download("demo", site / "work" / "dest"),
}


@pytest.mark.parametrize("layout_dir", LAYOUT)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_layout_directory_swapped_for_a_symlink_is_refused_and_its_target_untouched(
        site: Path, layout_dir: str, operation: str) -> None:
    _swap_for_link(site, layout_dir)
    before = snapshot(site / "canary", times=True)
    with pytest.raises(UnsafeStoreError, match=rf"store/{layout_dir} is a symlink") as caught:
        OPERATIONS[operation](Store(site / "store"), site)
    assert caught.value.path == str(site / "store" / layout_dir)
    assert snapshot(site / "canary", times=True) == before
    assert os.listdir(site / "work") == []


@pytest.mark.parametrize("operation", ["gc", "publish", "verify", "download"])
def test_a_name_directory_swapped_for_a_symlink_is_refused(site: Path, operation: str) -> None:
    _swap_for_link(site, "manifests/demo")
    before = snapshot(site / "canary", times=True)
    with pytest.raises(UnsafeStoreError, match=r"manifests/demo is a symlink"):
        OPERATIONS[operation](Store(site / "store"), site)
    assert snapshot(site / "canary", times=True) == before


def test_the_name_locks_directory_swapped_for_a_symlink_is_refused(site: Path) -> None:
    _swap_for_link(site, "locks/names")
    before = snapshot(site / "canary", times=True)
    with pytest.raises(UnsafeStoreError, match=r"locks/names is a symlink"):
        Store(site / "store").publish(site / "src", "demo")
    assert snapshot(site / "canary", times=True) == before


def test_a_layout_directory_that_is_a_file_is_refused_as_not_a_directory(site: Path) -> None:
    staging = site / "store" / "staging"
    staging.rmdir()
    staging.write_text("not a directory\n")
    with pytest.raises(UnsafeStoreError, match=r"store/staging is not a directory"):
        Store(site / "store").gc()
    assert staging.read_text() == "not a directory\n"


def test_a_layout_directory_owned_by_another_user_is_refused_and_nothing_is_deleted(site: Path) -> None:
    require_real_root("chown a layout directory to another user")
    blobs = site / "store" / "blobs"
    os.chown(blobs, 4242, 4242)
    orphan = blobs / ("0" * 64)
    orphan.write_bytes(b"unreferenced")
    with pytest.raises(UnsafeStoreError, match=r"store/blobs is owned by uid 4242"):
        Store(site / "store").gc()
    assert orphan.exists()


def test_a_missing_store_is_still_not_a_store_and_grows_nothing(fast_tmp: Path) -> None:
    for call in (Store(fast_tmp / "nowhere").gc, Store(fast_tmp / "nowhere").verify, Store(fast_tmp / "nowhere").list):
        with pytest.raises(NotAStoreError):
            call()
    assert not (fast_tmp / "nowhere").exists()


# -- races: the swap happens while the operation runs ---------------------------------------------------------

#: The attacker's loop, in a process of its own (a thread would wait for the GIL the operation holds): flip
#: DIRECTORY between the real one and a symlink to CANARY, at most a bounded number of times.
_FLIP = """
import os, sys
directory, canary = sys.argv[1], sys.argv[2]
aside = directory + ".aside"
for count in range(5_000_000):
    if count == 1:
        os.write(1, b"+")  # the first swap is done: the operation may start
    try:
        os.rename(directory, aside)
        os.symlink(canary, directory)
        for _ in range(2_000):  # hold each state a while: the link, then the real directory
            pass
        os.unlink(directory)
        os.rename(aside, directory)
        for _ in range(2_000):
            pass
    except OSError:
        pass  # the operation made or removed a name meanwhile: flip again
"""


@pytest.fixture
def swapper(site: Path) -> Iterator[Callable[[Path], None]]:
    """``swapper(directory)`` starts the attacker's process; it is killed and its last swap undone at the end."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(directory: Path) -> None:
        process = subprocess.Popen([sys.executable, "-c", _FLIP, str(directory), str(site / "canary")],
                                   stdout=subprocess.PIPE)
        started.append((process, directory))
        assert process.stdout is not None and process.stdout.read(1) == b"+", "the attacker never swapped"

    yield start
    for process, directory in started:
        process.kill()
        process.wait()
        if directory.is_symlink():
            directory.unlink()
        aside = directory.with_name(f"{directory.name}.aside")
        if aside.exists() and not directory.exists():  # publish may have made a new one meanwhile
            aside.rename(directory)


def _runs_without_harm(site: Path, run: Callable[[int], object]) -> tuple[int, int]:
    """Run ``run(i)`` RACE_RUNS times; each either works or is refused with a named error. (ok, refused)."""
    ok = refused = 0
    for i in range(RACE_RUNS):
        try:
            run(i)
            ok += 1
        except (UnsafeStoreError, NotAStoreError, FileNotFoundError, NotADirectoryError, FileExistsError):
            refused += 1
        except IntegrityError as err:
            # blobs/ made anew in the instant the attacker had it aside holds none of the version's tree objects:
            # its manifest is unreadable there, and gc refuses to sweep (never a deletion, the canary says).
            assert "tree object" in str(err) and "is missing" in str(err), err
            refused += 1
    return ok, refused


@pytest.mark.parametrize("layout_dir", ["blobs", "staging"])
def test_gc_racing_a_swap_of_its_layout_directory_never_deletes_outside_the_store(
        site: Path, swapper: Callable[[Path], None], layout_dir: str) -> None:
    for i in range(20):  # orphans for gc to want to delete, and a canary full of blob-like names
        (site / "canary" / f"{i:064x}").write_bytes(b"victim")
    before = snapshot(site / "canary", times=True)
    swapper(site / "store" / layout_dir)
    store = Store(site / "store")
    ok, refused = _runs_without_harm(site, lambda i: store.gc())
    assert snapshot(site / "canary", times=True) == before
    assert ok + refused == RACE_RUNS, (ok, refused)


@pytest.mark.parametrize("layout_dir", ["blobs", "staging", "locks"])
def test_publish_racing_a_swap_of_its_layout_directory_never_writes_outside_the_store(
        site: Path, swapper: Callable[[Path], None], layout_dir: str) -> None:
    before = snapshot(site / "canary", times=True)
    swapper(site / "store" / layout_dir)
    store = Store(site / "store")

    def publish(i: int) -> object:
        (site / "src" / "README.txt").write_text(f"new content in run {i}, so every publish stages a blob\n")
        return store.publish(site / "src", f"n{i}")
    ok, refused = _runs_without_harm(site, publish)
    assert snapshot(site / "canary", times=True) == before
    assert ok + refused == RACE_RUNS, (ok, refused)

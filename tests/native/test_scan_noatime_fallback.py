"""The scan's ``O_NOATIME`` fallback: a directory the scanning user does not own refuses ``O_NOATIME``
(``EPERM``), so both walks open it without and say the listing may have moved atimes (``listed_noatime``
false); the captured entries stay the same. Only a second user reaches that path, so the walks run in a
child that root turned into ``nobody``."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import attrs
import pytest

from artifactkit.engine.reference.scan import scan_tree
from tests.native.scan_trees import native_capture
from tests.support.capability import require_real_root

NOBODY = 65534


@pytest.fixture
def shared_tree(native: ModuleType) -> Iterator[Path]:
    """root's tree in a directory every user may enter (the test's own scratch dirs are private), with one
    subdirectory that ``nobody`` owns."""
    require_real_root("scanning as another user (setuid to nobody)")
    base = Path(tempfile.mkdtemp(prefix="artifactkit-noatime-", dir="/dev/shm"))
    base.chmod(0o755)
    src = base / "src"
    for d in ("", "a", "a/b", "own"):
        (src / d).mkdir(mode=0o755, exist_ok=True)
        (src / d / "f").write_bytes(b"x" * 10)
        (src / d / "f").chmod(0o644)
    os.chown(src / "own", NOBODY, NOBODY)
    yield src
    shutil.rmtree(base)


def _walks_as_nobody(src: Path) -> tuple[object, object, object]:
    """The walks of ``src`` by a child running as ``nobody`` — the reference's, the core's, and the core's capture
    on two threads (which captures a directory ahead only where ``O_NOATIME`` is granted):
    ``(listed_noatime, entries)`` of each, or the exception a walk raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            found = []
            for walker in (None, native_capture(), native_capture(threads=2, split_min=2)):
                try:
                    tree = scan_tree(src, walker=walker)
                    found.append((tree.listed_noatime, list(tree.entries)))
                except Exception as err:  # noqa: BLE001 - reported to the parent, which fails on it
                    found.append(err)
            with os.fdopen(write_end, "wb") as out:
                pickle.dump(found, out)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as got:
        data = got.read()
    os.waitpid(pid, 0)
    reference, native, captured = pickle.loads(data)  # our own child's bytes
    return reference, native, captured


def test_a_directory_of_another_owner_is_listed_without_noatime_by_both_walks_alike(shared_tree: Path) -> None:
    reference, native, captured = _walks_as_nobody(shared_tree)
    assert not isinstance(reference, BaseException), reference
    assert not isinstance(native, BaseException), native
    # The third walk came after both listings: the atimes they moved stay put (relatime), so every field is equal.
    assert captured == native
    (ref_noatime, ref_entries), (native_noatime, native_entries) = reference, native  # type: ignore[misc]
    assert ref_noatime is native_noatime is False  # root's directories refused O_NOATIME to nobody
    assert [e.path for e in native_entries] == [".", "a", "f", "own", "a/b", "a/f", "a/b/f", "own/f"]
    # The reference walked first, listing root's directories without O_NOATIME (relatime: the first listing
    # since they changed moves their atimes); that moved atime is what listed_noatime=False warns of, and
    # the only difference the native walk may see. Every other field is the same.
    moved = {r.path for r, n in zip(ref_entries, native_entries, strict=True) if r.atime_ns != n.atime_ns}
    assert moved <= {".", "a", "a/b"}, moved
    assert moved, "no directory's atime moved: the walks did not list without O_NOATIME"
    assert [attrs.evolve(n, atime_ns=0) for n in native_entries] == [attrs.evolve(r, atime_ns=0) for r in ref_entries]


def test_a_tree_the_scanner_owns_is_listed_with_noatime(native: ModuleType, shared_tree: Path) -> None:
    # The same walks as root, who may always ask for O_NOATIME: the fallback above is the other user's.
    for walker in (None, native_capture()):
        assert scan_tree(shared_tree, walker=walker).listed_noatime is True

"""The native core's create-verify-restore against the reference's ``create_items``, on generated trees:
every field of every created file and link alike (lstat, xattrs, flags, holes, content, target)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.native.trees import File, build, names, native_create, python_create, restore, restored, unique, write_blobs
from tests.strategies import timestamps_ns

contents = st.sampled_from([b"", b"x", b"same content\n", bytes(range(256)) * 20]) | st.binary(max_size=9000)
files = st.builds(File, path=names, data=contents, mode=st.sampled_from([0o644, 0o400, 0o4755, 0o2711, 0o1777]),
                  times=st.tuples(timestamps_ns, timestamps_ns), hole=st.sampled_from([0, 0, 8192]),
                  xattrs=st.dictionaries(st.sampled_from(["user.a", "user.é"]), st.binary(max_size=40), max_size=2))


# `work` hands out a fresh directory at every call, so sharing it across examples is safe.
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.lists(files, max_size=8), nested=st.lists(files, max_size=5),
       links=st.dictionaries(st.sampled_from(["l1", "l 2", "l-é"]), st.sampled_from(["a", "../out", "/abs", "sub/x"]),
                             max_size=3),
       link_times=st.tuples(timestamps_ns, timestamps_ns), hardlink=st.booleans(), threads=st.sampled_from([1, 2]))
def test_native_restores_give_the_references_every_field(
        native: ModuleType, work: Callable[[str], Path], *, top: list[File], nested: list[File], links: dict[str, str],
        link_times: tuple[int, int], hardlink: bool, threads: int) -> None:
    src, blobs = work("src"), work("blobs")
    tree = [f for f in unique(top) if f.path.casefold() not in {n.casefold() for n in links}]
    tree += [File(f"sub/{f.path}", f.data, f.mode, f.times, f.hole, f.xattrs) for f in unique(nested)]
    extra = {"second name": tree[0].path} if hardlink and tree and "second name" not in links else {}
    build(src, tree, dirs=["sub"], links=links, hardlinks=extra)
    for name in links:
        os.utime(src / name, ns=link_times, follow_symlinks=False)
    entries = write_blobs(src, blobs)
    reference, candidate = work("dest") / "tree", work("dest") / "tree"
    restore(entries, reference, blobs, python_create)
    restore(entries, candidate, blobs, native_create(native, threads))
    assert restored(candidate, entries) == restored(reference, entries)


def test_a_big_directory_spread_over_threads_restores_like_the_reference(
        native: ModuleType, work: Callable[[str], Path]) -> None:
    src, blobs = work("src"), work("blobs")
    build(src, [File(f"d/f{i:04}", b"%d" % (i % 7), 0o640, (i * 10**9 + 1, -i * 10**9 - 1)) for i in range(700)])
    entries = write_blobs(src, blobs)
    reference, candidate = work("dest") / "tree", work("dest") / "tree"
    restore(entries, reference, blobs, python_create)
    restore(entries, candidate, blobs, native_create(native, 2))
    assert restored(candidate, entries) == restored(reference, entries)

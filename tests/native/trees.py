"""Trees built from a description, and both engines' stage and create run side by side on them (the
differential tests' shared helpers; the fixtures are in this directory's ``conftest.py``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from artifactkit.engine.blob_check import BlobLookup, HasBlob, blob_lookup
from artifactkit.engine.blobs import BlobSource
from artifactkit.engine.reference.create import create_items
from artifactkit.engine.reference.restore_meta import plan
from artifactkit.engine.reference.scan import capture_tree, scan_tree
from artifactkit.engine.reference.stage import stage_file
from artifactkit.engine.values import Staged, StageItem
from artifactkit.manifest.paths import parent_of
from artifactkit.metadata.extended import data_extents, read_flags, read_xattrs
from artifactkit.metadata.model import ROOT, FileMeta
from artifactkit.metadata.times import shallowest_first


@dataclass
class File:
    """A file of a described tree: content (``hole`` bytes of hole before it and after it, when sparse)."""

    path: str
    data: bytes = b""
    mode: int = 0o644
    times: tuple[int, int] = (0, 0)  # (atime_ns, mtime_ns)
    hole: int = 0
    xattrs: dict[str, bytes] = field(default_factory=dict)


def build(root: Path, files: list[File], dirs: list[str] = (), links: dict[str, str] | None = None,  # type: ignore[assignment]
          hardlinks: dict[str, str] | None = None) -> None:
    """Make the tree at ``root`` (existing, empty): directories, files, symlinks, then extra names."""
    for d in sorted(dirs, key=lambda p: p.count("/")):
        (root / d).mkdir(exist_ok=True)
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if f.hole:
                os.pwrite(fd, f.data, f.hole)
                os.ftruncate(fd, 2 * f.hole + len(f.data))
            else:
                os.write(fd, f.data)
            for name, value in f.xattrs.items():
                os.setxattr(fd, name, value)
            os.fchmod(fd, f.mode)
        finally:
            os.close(fd)
    for name, target_path in (links or {}).items():
        os.symlink(target_path, root / name)
    for name, first in (hardlinks or {}).items():
        os.link(root / first, root / name)
    for f in files:
        os.utime(root / f.path, ns=f.times)


def stage_items(root: Path) -> list[StageItem]:
    """Every file of the tree at ``root`` as the publish's scan hands it to the execute stage."""
    tree = scan_tree(root)
    return [(i, e, tree.identities[e.path]) for i, e in enumerate(tree.entries)
            if e.kind == "file" and e.hardlink is None]


def stage_python(root: Path, items: list[StageItem], txn: Path, blobs: Path, *,
                 lookup: HasBlob | None = None) -> list[Staged]:
    txn_fd, blobs_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY), os.open(blobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        has_blob, seen = lookup or blob_lookup(blobs_fd, len(items)), set[str]()
        return [stage_file(str(root), item, txn_fd, has_blob, seen) for item in items]
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)


def stage_native(native: ModuleType, root: Path, items: list[StageItem], txn: Path, blobs: Path, *,
                 threads: int = 2, split: int | None = None, shared: bool = True) -> list[Staged]:
    """The core's staging of ``items``: one call, or (``split``) two calls at that position, as a publish's
    batches are, sharing one state with the reference's listing of ``blobs`` (``shared=False``: a fresh state
    each, the control that sharing is what makes equal content staged once)."""
    txn_fd, blobs_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY), os.open(blobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        from artifactkit import _native  # here, not at the top: where the core is not built, `native` skips first

        if split is None:
            return list(native.stage_files(str(root), txn_fd, blobs_fd, items, threads=threads,
                                           state=_native.StageState()))

        listed = blob_lookup(blobs_fd, len(items)).names
        state = _native.StageState(listed)
        found = []
        for batch in (items[:split], items[split:]):
            found += native.stage_files(str(root), txn_fd, blobs_fd, batch, threads=threads,
                                        state=state if shared else _native.StageState(listed))
        return found
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)


def stage_kept(native: ModuleType, root: Path, txn: Path, blobs: Path, *, threads: int = 2,
               split: int | None = None) -> list[Staged]:
    """The core's staging of its own capture of ``root`` (a publish's path), its reads kept in one state over one
    call or (``split``) two, made ``Staged`` here only to be compared."""
    from artifactkit import _native

    captured = native.NativeEngine(1, "publish").walk(str(root), read_links=True, on_progress=lambda _: None)
    reads, _ = captured.entries.planned_reads(captured.identities)
    txn_fd, blobs_fd = os.open(txn, os.O_RDONLY | os.O_DIRECTORY), os.open(blobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        lookup = blob_lookup(blobs_fd, len(reads))
        state = _native.StageState(lookup.names if isinstance(lookup, BlobLookup) else None)
        cut = len(reads) if split is None else min(split, len(reads))
        spans = [(0, len(reads))] if split is None else [(0, cut), (cut, len(reads))]
        found: list[Staged] = []
        for span in spans:
            found += native.stage_files(str(root), txn_fd, blobs_fd, reads, span=span, threads=threads, state=state)
        return found
    finally:
        os.close(txn_fd)
        os.close(blobs_fd)


def staged_files(txn: Path) -> dict[str, tuple[bytes, Any, int]]:
    """Every staged blob: its bytes, its data runs (sparse stays sparse) and its mode."""
    found = {}
    for name in sorted(os.listdir(txn)):
        fd = os.open(txn / name, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            found[name] = (os.pread(fd, st.st_size + 1, 0), data_extents(fd, st.st_size), st.st_mode)
        finally:
            os.close(fd)
    return found


def write_blobs(src: Path, blobs: Path) -> list[FileMeta]:
    """The tree's full capture (what a manifest records), its content stored in ``blobs`` by digest."""
    entries = capture_tree(src)
    for e in entries:
        if e.kind == "file" and e.sha256 is not None and not (blobs / e.sha256).exists():
            (blobs / e.sha256).write_bytes((src / e.path).read_bytes())
    return entries


CreateFn = Callable[[int, list[tuple[str, list[FileMeta]]], BlobSource], None]


def restore(entries: list[FileMeta], dest: Path, blobs: Path, create: CreateFn) -> None:
    """A download's execute stage alone: directories made, then files and links by ``create``."""
    by_path = plan(entries, "exact")
    dest.mkdir()
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    blobs_fd = os.open(blobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        children: dict[str, list[FileMeta]] = {}
        for path, e in by_path.items():
            if path != ROOT:
                children.setdefault(parent_of(path), []).append(e)
        dirs = shallowest_first(p for p, e in by_path.items() if e.kind == "dir")
        for d in dirs[1:]:
            os.mkdir(d, 0o700, dir_fd=root_fd)
        items = [(d, todo) for d in dirs
                 if (todo := [e for e in children.get(d, ()) if e.kind != "dir" and e.hardlink is None])]
        create(root_fd, items, BlobSource(str(blobs), dir_fd=blobs_fd))
    finally:
        os.close(root_fd)
        os.close(blobs_fd)


def python_create(root_fd: int, items: list[tuple[str, list[FileMeta]]], blobs: BlobSource) -> None:
    create_items(root_fd, items, blobs)


def native_create(native: ModuleType, threads: int = 2) -> CreateFn:
    def create(root_fd: int, items: list[tuple[str, list[FileMeta]]], blobs: BlobSource) -> None:
        native.create_files(root_fd, blobs, items, threads)
    return create


def restored(dest: Path, entries: list[FileMeta]) -> dict[str, tuple[Any, ...]]:
    """Every field of every created file and link: lstat first, then xattrs, flags, content, target."""
    found = {}
    for e in entries:
        if e.kind not in ("file", "symlink") or e.hardlink is not None:
            continue
        path = dest / e.path
        st = os.lstat(path)
        row: tuple[Any, ...] = (st.st_mode, st.st_size, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_atime_ns,
                                st.st_nlink, read_xattrs(str(path)))
        if e.kind == "file":
            fd = os.open(path, os.O_RDONLY | os.O_NOATIME)
            try:
                row += (read_flags(fd, str(path)), data_extents(fd, st.st_size), os.pread(fd, st.st_size + 1, 0))
            finally:
                os.close(fd)
        else:
            row += (os.readlink(path),)
        found[e.path] = row
    return found


def names_call(error: BaseException, call: str) -> None:
    """``error`` is an ``OSError`` whose message names ``call`` before its strerror and path (issue 49)."""
    assert isinstance(error, OSError), error
    expected = rf"\[Errno \d+\] {call}: {re.escape(os.strerror(error.errno or 0))}: '"
    assert re.match(expected, str(error)), str(error)


def same_error(first: BaseException, second: BaseException) -> None:
    """Two engines' refusals of one case: class, message, errno, filename and every context field alike."""
    assert type(first) is type(second), (first, second)
    assert str(first) == str(second)
    for name in ("errno", "filename", "filename2", "context"):
        assert getattr(first, name, None) == getattr(second, name, None), name
    assert type(first.__cause__) is type(second.__cause__)


#: Names a shell would trip over: spaces, dashes, unicode, a leading dot; never "/" or NUL.
names = st.text(alphabet=st.sampled_from("ab -_.é雪Z9"), min_size=1, max_size=8).filter(lambda n: n not in (".", ".."))


def unique(items: list[File]) -> list[File]:
    """The first file of each name, names compared case-folded."""
    seen: dict[str, File] = {}
    for f in items:
        seen.setdefault(f.path.casefold(), f)
    return list(seen.values())

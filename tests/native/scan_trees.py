"""Source trees for the scan's differential tests: described by hypothesis, built on a real filesystem with
every kind of entry and every field the scan captures (bytes names that are no UTF-8 included), and both
engines' scans and publishes run side by side on them."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import attrs
from hypothesis import strategies as st

from artifactkit import Store
from artifactkit.conformance.corpus import can_chown_to_others, can_make_devices
from artifactkit.engine.reference.lists import CapturedList
from artifactkit.engine.reference.scan import Walker, scan_tree
from artifactkit.engine.values import ScannedTree
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.metadata.flags import restore_flags_fd
from tests.native.trees import names
from tests.strategies import timestamps_ns

#: Real root can give other owners, trusted.* xattrs (on links too) and device nodes; others generate none.
PRIVILEGED = can_chown_to_others()
DEVICES = can_make_devices()
DIRS = (b"", b"sub dir", b"sub dir/deeper")
#: Every directory plain: mode 0o755, times (1, 2), no xattrs, owner or flags.
PLAIN_DIRS = [(0o755, (1, 2), {}, None, 0)] * len(DIRS)
FS_NODUMP_FL = 0x40

#: Names as bytes: the usual text, and bytes no UTF-8 decoder takes (Python names them with surrogates, which
#: sort before U+E000.. but their bytes after its UTF-8: "\uff71" and b"\xff" are in opposite orders).
byte_names = names.map(os.fsencode) | st.sampled_from(
    [b"\xff", b"caf\xe9", b"a\x80b", b"\xed\xa0\x80", b"\xf0\x9f\x98", "\uff71".encode(), "a\ue000".encode()])
times = st.tuples(timestamps_ns, timestamps_ns)
xattr_names = st.sampled_from(["user.a", "user.é", "user.\udcff", "user.\uff71"]
                              + (["trusted.t", "security.s"] if PRIVILEGED else []))
xattrs = st.dictionaries(xattr_names, st.binary(max_size=40), max_size=2)
#: Links, FIFOs and devices take no user.* xattrs (the kernel allows those on files and directories only).
special_xattrs = st.dictionaries(st.sampled_from(["trusted.t"] if PRIVILEGED else []), st.binary(max_size=8))
owners = st.sampled_from([None, (1234, 5678), (0, 4321)] if PRIVILEGED else [None])


@dataclass
class Node:
    """One entry: where, its name, kind and the fields it is built with."""

    parent: int  # an index into DIRS
    name: bytes
    kind: str
    mode: int = 0o644
    times: tuple[int, int] = (0, 0)
    data: bytes = b""
    hole: int = 0
    target: bytes = b""
    xattrs: dict[str, bytes] = field(default_factory=dict)
    owner: tuple[int, int] | None = None
    link_to: int = 0  # a hard link: which file (by position among the files)

    @property
    def path(self) -> bytes:
        return self.name if not DIRS[self.parent] else DIRS[self.parent] + b"/" + self.name


_parent = st.integers(min_value=0, max_value=len(DIRS) - 1)
_files = st.builds(Node, _parent, byte_names, st.just("file"), st.sampled_from([0o644, 0o400, 0o4755, 0o2711, 0]),
                   times, st.binary(max_size=300), st.sampled_from([0, 0, 8192]), st.just(b""), xattrs, owners)
_links = st.builds(Node, _parent, byte_names, st.just("symlink"), st.just(0o777), times, st.just(b""), st.just(0),
                   byte_names | st.sampled_from([b"../outside", b"/abs/olute", b"x" * 300, b"sub dir/\xff"]),
                   special_xattrs, owners)
_fifos = st.builds(Node, _parent, byte_names, st.just("fifo"), st.sampled_from([0o600, 0o1644]), times,
                   xattrs=special_xattrs, owner=owners)
_hard = st.builds(Node, _parent, byte_names, st.just("hardlink"), link_to=st.integers(min_value=0, max_value=9))
_devices = st.builds(Node, _parent, byte_names, st.sampled_from(["char", "block"]), st.just(0o640), times,
                     hole=st.integers(min_value=0, max_value=(1 << 20) - 1), xattrs=special_xattrs)  # hole: minor
nodes = st.lists(st.one_of(_files, _links, _fifos, _hard, *([_devices] if DEVICES else [])), max_size=14)
dir_specs = st.lists(st.tuples(st.sampled_from([0o755, 0o1777, 0o2750, 0o500]), times, xattrs, owners,
                               st.sampled_from([0, FS_NODUMP_FL])), min_size=len(DIRS), max_size=len(DIRS))


def build(root: Path, nodes: list[Node], dirs: list[tuple[int, tuple[int, int], dict[str, bytes], Any, int]]) -> None:
    """Make the tree at ``root`` (existing, empty): its directories, then every node (a name taken is
    skipped), then the directories' modes, owners, flags and times, deepest first."""
    base = os.fsencode(root)
    for d in DIRS[1:]:
        os.mkdir(base + b"/" + d)
    made: set[bytes] = set(DIRS)
    linkable: list[bytes] = []  # files and symlinks: a later "hardlink" node names one of them
    for node in nodes:
        if node.path in made:
            continue
        made.add(node.path)
        full = base + b"/" + node.path
        if node.kind == "hardlink":
            if not linkable:
                continue
            os.link(linkable[node.link_to % len(linkable)], full, follow_symlinks=False)
            continue
        _make(full, node)
        if node.kind in ("file", "symlink"):
            linkable.append(full)
        for name, value in node.xattrs.items():
            os.setxattr(full, name, value, follow_symlinks=False)
        if node.owner is not None:
            os.chown(full, *node.owner, follow_symlinks=False)
        if node.kind != "symlink":
            os.chmod(full, node.mode)  # after chown, which clears setuid/setgid
        os.utime(full, ns=node.times, follow_symlinks=False)
    for d, (mode, when, attrs_, owner, flags) in reversed(list(zip(DIRS, dirs, strict=True))):
        full = base + b"/" + d if d else base
        for name, value in attrs_.items():
            os.setxattr(full, name, value)
        if owner is not None:
            os.chown(full, *owner)
        fd = os.open(full, os.O_RDONLY | os.O_DIRECTORY)
        try:
            restore_flags_fd(fd, flags, os.fsdecode(full))
        finally:
            os.close(fd)
        os.chmod(full, mode)
        os.utime(full, ns=when)


def _make(full: bytes, node: Node) -> None:
    if node.kind == "file":
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.pwrite(fd, node.data, node.hole)
            os.ftruncate(fd, 2 * node.hole + len(node.data))
        finally:
            os.close(fd)
    elif node.kind == "symlink":
        os.symlink(node.target, full)
    elif node.kind == "fifo":
        os.mkfifo(full, 0o600)
    else:
        ifmt = stat.S_IFCHR if node.kind == "char" else stat.S_IFBLK
        os.mknod(full, ifmt | 0o600, os.makedev(240, node.hole))


def fields(tree: ScannedTree) -> tuple[Any, ...]:
    """Everything a scan returns, every field of every entry (``ctime_ns`` and ``nlink`` too, which
    ``FileMeta``'s equality leaves out), and the identities in their order."""
    return (tree.root, [attrs.astuple(e, recurse=False) for e in tree.entries], list(tree.identities.items()),
            tree.listed_noatime, tree.cached, tree.matched, tree.kept)


def native_capture(threads: int = 1, **options: Any) -> Walker:
    """The native engine's walk on ``threads``, the capture kept in the core, with ``options`` (``split_min``):
    import it only in tests that asked for the ``native`` fixture (which skips, or fails in CI, where the core is
    not built), so that collecting them never fails."""
    import functools

    from artifactkit.engine.native import NativeEngine

    return functools.partial(NativeEngine(threads, "publish").walk, **options)


def native_entries(tree: ScannedTree) -> ScannedTree:
    """``tree`` (a native capture) with every entry and identity made plain, as the reference's scan holds them."""
    return attrs.evolve(tree, entries=CapturedList(tree.entries), identities=dict(tree.identities))


def both_scans(src: Path | str, **options: Any) -> tuple[ScannedTree, ScannedTree]:
    """The reference's scan and the native engine's capture of ``src``, its entries made through the engine."""
    return scan_tree(src, **options), native_entries(scan_tree(src, walker=native_capture(), **options))


def manifest_of(store: Store, ref: ArtifactRef) -> bytes:
    with open(store.layout.manifest_path(ref), "rb") as handle:
        return handle.read()

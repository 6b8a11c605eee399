"""Capture a source tree in parts of a bounded number of entries, in the manifest's own order: a publish of any size
holds one part at a time (:mod:`~artifactkit.store.publish_parts`).

The whole scan (:mod:`.scan`) lists directories depth first in name order, and the manifest sorts its entries by path
afterwards. Here a directory's entries come out among its subdirectories' subtrees in path order, each subtree walked
where ``name/`` sorts among its siblings' names (``a.b`` < ``a/x`` < ``a0``): entries leave in the order of the
manifest's lines, so each part's lines follow the last part's and one pass makes the tree's objects. Each directory is
listed with the whole scan's calls in its order (open with ``O_NOATIME``, check it is the inode listed, list it,
``lstat`` each name, read each entry's xattrs); what differs is when, and the manifest does not:

- a hard link's first name is its smallest path, so the first of its names to come out. Its later names take that
  capture, taken before any read of the inode as the whole scan's are (and the publish gives one in a later part
  the content its first name's read found);
- a directory's flags are read as its entry comes out (opened with ``O_NOATIME``, checked to be the inode listed),
  not when it is listed: that may be a whole subtree later (``a`` < ``a.bak/...`` < ``a/``);
- link targets are read once the part's ``lstat``\\ s are taken (``readlink`` moves a link's atime).

What it holds: one part, the directories being walked (what of their listing has not come out yet), and one capture
per inode with more than one name.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Mapping

import attrs

from artifactkit._fsutil import naming
from artifactkit._os_calls import calling, named
from artifactkit._syscalls import open_noatime
from artifactkit.engine.plan import Content
from artifactkit.engine.reference.lists import CapturedList
from artifactkit.engine.reference.scan import (
    LinkReader,
    dir_replaced,
    not_a_directory,
    source_xattrs,
    too_deep,
    unsupported,
    vanished,
)
from artifactkit.engine.values import ScannedTree
from artifactkit.errors import UnsupportedFileType
from artifactkit.manifest.limits import file_size_limit, file_too_large
from artifactkit.metadata.extended import read_flags
from artifactkit.metadata.model import LINKABLE_KINDS, ROOT, FileMeta, Xattrs, meta_from_stat

#: An inode: ``(st_dev, st_ino)``.
Identity = tuple[int, int]


@attrs.define
class _Dir:
    """A directory being walked: what of its listing has not come out yet, smallest key last. An item is
    ``(key, entry, path, identity)``; an entry of ``None`` is the subtree of the subdirectory ``path`` (its key:
    ``name/``)."""

    rel: str
    identity: Identity
    pending: list[tuple[str, FileMeta | None, str, Identity]]


@attrs.define
class PartWalk:
    """One walk of a source in parts (:func:`scan_parts`); iterating it walks."""

    root: str
    part_entries: int
    read_links: bool
    on_progress: Callable[[int], None]
    size_limit: int = attrs.field(factory=file_size_limit)  # a setting that is no limit is refused before a read
    part: list[FileMeta] = attrs.field(factory=list)
    identities: list[Identity] = attrs.field(factory=list)  # the part's, entry by entry
    link_stats: dict[str, os.stat_result] = attrs.field(factory=dict)  # links captured, their targets not read
    link_dirs: dict[str, Identity] = attrs.field(factory=dict)  # the directories of the part's links
    firsts: dict[Identity, FileMeta] = attrs.field(factory=dict)  # a linked inode -> its first name's capture
    refused: list[str] = attrs.field(factory=list)
    oversized: tuple[str, int] | None = None
    listed_noatime: bool = True
    captured: int = 0
    #: Directories not listed yet -> their captured atime; and how many a listing without ``O_NOATIME`` moved (the
    #: publish counts them here, right after each listing: a part's may be listed in the next part's walk).
    dir_atimes: dict[str, int] = attrs.field(factory=dict)
    moved_dirs: int = 0

    def __iter__(self) -> Iterator[ScannedTree]:
        try:
            yield from self.walk()
        except OSError as err:
            if err.errno != errno.ENAMETOOLONG:
                raise
            raise too_deep(self.root, err) from err

    def walk(self) -> Iterator[ScannedTree]:
        st = named("lstat", os.lstat, self.root)
        if not stat.S_ISDIR(st.st_mode):
            raise not_a_directory(self.root)
        identity = (st.st_dev, st.st_ino)
        self.dir_atimes[""] = st.st_atime_ns
        top, flags = self.list_dir("", identity)
        # Its xattrs from "root/.": a directory, whatever the form of root; listed at once, so its flags are known.
        root = meta_from_stat(ROOT, st, owners=True, xattrs=source_xattrs(f"{self.root}/{ROOT}"))
        top.pending.append((ROOT, attrs.evolve(root, flags=flags), ROOT, identity))
        top.pending.sort(reverse=True)
        stack = [top]
        while stack:
            here = stack[-1]
            if not here.pending:
                stack.pop()
                continue
            _, entry, path, identity = here.pending.pop()
            if entry is None:
                stack.append(self.list_dir(path, identity)[0])
            else:
                self.take(entry, identity, here)
                if len(self.part) >= self.part_entries:
                    yield self.finish()
        if self.part or self.refused or self.oversized:  # a refusal found after the last cut is raised too
            yield self.finish()

    def list_dir(self, rel: str, identity: Identity) -> tuple[_Dir, int | None]:
        """``_scan_dir`` of ``rel``: its entries and subtrees in path order, captured (and the root's flags)."""
        top = os.path.join(self.root, rel) if rel else self.root
        fd, noatime = named("open", open_noatime, top, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # Opened by path, following any link in its components: it must still be the directory its parent
            # listed, or the walk would wander outside the tree.
            with naming(top):
                st = named("fstat", os.fstat, fd)
            if (st.st_dev, st.st_ino) != identity:
                raise dir_replaced(self.root, rel or ROOT, "scanned")
            flags = named("ioctl", read_flags, fd, top) if not rel else None  # the others' as their entry came out
            with naming(top):
                names = sorted(named("listdir", os.listdir, fd))
                after = named("fstat", os.fstat, fd).st_atime_ns if not noatime else 0
            prefix = f"{rel}/" if rel else ""
            try:
                with calling("lstat"):  # one block a directory, not one a name: a tenth of the walk's time
                    stats = [os.lstat(name, dir_fd=fd) for name in names]
            except FileNotFoundError as err:  # listed, then gone: a race with whoever writes the source
                raise vanished(self.root, prefix + os.fsdecode(err.filename) if err.filename is not None
                               else rel or ROOT) from err
            pending = self.capture(top, prefix, names, stats)
        finally:
            os.close(fd)
        self.listed_noatime = self.listed_noatime and noatime
        captured = self.dir_atimes.pop(rel)
        self.moved_dirs += not noatime and after != captured
        self.on_progress(self.captured)
        pending.sort(reverse=True)
        return _Dir(rel, identity, pending), flags

    def dir_flags(self, rel: str, identity: Identity) -> int | None:
        """The flags of the directory ``rel``, which must still be the inode its parent listed (opened, not listed:
        its atime stays)."""
        top = os.path.join(self.root, rel)
        fd, _ = named("open", open_noatime, top, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with naming(top):
                st = named("fstat", os.fstat, fd)
            if (st.st_dev, st.st_ino) != identity:
                raise dir_replaced(self.root, rel, "scanned")
            return named("ioctl", read_flags, fd, top)
        finally:
            os.close(fd)

    def capture(self, top: str, prefix: str, names: list[str],
                stats: list[os.stat_result]) -> list[tuple[str, FileMeta | None, str, Identity]]:
        """``_Scan.add`` without a cache: each entry's capture, its xattrs read by path."""
        pending: list[tuple[str, FileMeta | None, str, Identity]] = []
        for name, st in zip(names, stats, strict=True):
            relpath, identity = prefix + name, (st.st_dev, st.st_ino)
            if st.st_size > self.size_limit and self.oversized is None and stat.S_ISREG(st.st_mode):
                self.oversized = (relpath, st.st_size)
            try:
                meta = meta_from_stat(relpath, st, owners=True, xattrs=_xattrs(f"{top}/{name}"))
            except UnsupportedFileType:
                self.refused.append(relpath)  # the rest is scanned so that the error names every one
                continue
            self.captured += 1
            pending.append((name, meta, relpath, identity))
            if stat.S_ISDIR(st.st_mode):
                pending.append((f"{name}/", None, relpath, identity))
                self.dir_atimes[relpath] = st.st_atime_ns
            elif stat.S_ISLNK(st.st_mode):
                self.link_stats[relpath] = st
        return pending

    def take(self, entry: FileMeta, identity: Identity, here: _Dir) -> None:
        """``entry`` into the part, a later name of a hard link as its first name's capture."""
        if entry.kind in LINKABLE_KINDS and entry.nlink is not None and entry.nlink > 1:
            first = self.firsts.setdefault(identity, entry)
            if first is not entry:
                entry = attrs.evolve(first, path=entry.path, hardlink=first.path)
        if entry.kind == "symlink":
            self.link_dirs[here.rel or ROOT] = here.identity
        elif entry.kind == "dir" and entry.path != ROOT:
            entry = attrs.evolve(entry, flags=self.dir_flags(entry.path, identity))
        self.part.append(entry)
        self.identities.append(identity)

    def finish(self) -> ScannedTree:
        """The part, its refusals first, then its link targets (every ``lstat`` of it taken)."""
        if self.refused:
            raise unsupported(self.root, self.refused)
        if self.oversized:
            path, size = self.oversized
            raise file_too_large(f"source {self.root!r}: {path!r} has", size, self.size_limit, where=self.root)
        part, identities = self.part, self.identities
        reader = LinkReader(self.root, self.link_dirs)
        try:
            for at, entry in enumerate(part):
                if entry.kind == "symlink":
                    before = self.link_stats.pop(entry.path)
                    if self.read_links:
                        part[at] = attrs.evolve(entry, target=reader.target(entry.path, before))
        finally:
            reader.close()
        self.part, self.identities, self.link_dirs = [], [], {}
        return ScannedTree(root=self.root, entries=CapturedList(part),
                           identities={entry.path: identity for entry, identity in zip(part, identities, strict=True)},
                           listed_noatime=self.listed_noatime)


def scan_parts(src: str | os.PathLike[str], *, part_entries: int, read_links: bool = True,
               on_progress: Callable[[int], None] | None = None) -> PartWalk:
    """The capture of the tree at ``src`` (a directory), part by part, ``part_entries`` entries each (the last fewer),
    in path order, each part's refusals raised before it is yielded. A later name of a hard link whose first name is
    in an earlier part has no content (``sha256`` ``None``). Its ``listed_noatime`` is of every listing so far;
    ``on_progress``: entries captured so far."""
    return PartWalk(os.fspath(src), max(1, part_entries), read_links, on_progress or _ignore)


def _ignore(count: int) -> None:
    pass


def _xattrs(path: str) -> Xattrs:
    """:func:`~.scan.source_xattrs`, asked again only where an entry has xattrs or ``listxattr`` failed (the usual
    entry has none: its one call, unwrapped, is a tenth of the walk's time)."""
    try:
        if not os.listxattr(path, follow_symlinks=False):
            return ()
    except OSError:
        pass  # asked again below, named and refused as the whole scan refuses it
    return source_xattrs(path)


def with_first_reads(part: ScannedTree, content: Mapping[Identity, Content]) -> ScannedTree:
    """``part`` with the content of each later name of a hard link whose first name is in an earlier part: what its
    read found (``content``, by inode)."""
    def earlier(entry: FileMeta) -> bool:
        return entry.kind == "file" and entry.hardlink is not None and entry.hardlink not in part.identities
    if not any(earlier(entry) for entry in part.entries):
        return part
    return attrs.evolve(part, entries=CapturedList(
        _with_read(entry, content[part.identities[entry.path]]) if earlier(entry) else entry
        for entry in part.entries))


def _with_read(entry: FileMeta, read: Content) -> FileMeta:
    sha, flags, extents = read
    return attrs.evolve(entry, sha256=sha, flags=flags, extents=extents)

"""Capture a source tree: every ``lstat`` before any read of content, links last.

Listing a directory moves its atime unless the fd was opened with ``O_NOATIME``, and
``readlink`` moves a symlink's atime, so the order here is the guarantee: lstat the entry,
list the directory through an ``O_NOATIME`` fd, lstat the children, and only after the whole
tree is captured read link targets (and, in the store, file contents).

A link's target is read through its directory's fd (checked to be the directory the scan listed) and
the link is ``lstat``-ed again after the ``readlink``: a link is retargeted only by replacing it (``ln
-sf``, ``rename``), so the same inode, ctime, mtime and size (the target's length) mean the target read
belongs to the times captured; anything else is :class:`SourceChangedError` naming it. An entry gone
between the listing and its ``lstat`` is one too. The cost: one ``lstat`` per link and one ``open`` per
directory that holds links, nothing per file (paired scans of 10,000 files: no change without links,
+3% with 1,000).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Protocol

import attrs

from artifactkit._fsutil import naming
from artifactkit._os_calls import named
from artifactkit._syscalls import open_noatime
from artifactkit.engine.content import sha256_of_fd
from artifactkit.engine.reference.lists import CapturedList
from artifactkit.engine.values import CacheHits, ScannedTree
from artifactkit.errors import SourceChangedError, TreeTooDeepError, UnsupportedFileType
from artifactkit.manifest.limits import check_source_sizes, file_size_limit, file_too_large
from artifactkit.manifest.paths import check_symlink_target
from artifactkit.metadata.extended import data_extents, read_flags, read_xattrs
from artifactkit.metadata.model import LINKABLE_KINDS, ROOT, FileMeta, Xattrs, meta_from_stat


class Walker(Protocol):
    """Another engine's walk without a stat cache (the native core's): the same :class:`ScannedTree` and the same
    errors."""

    def __call__(self, root: str, *, read_links: bool, on_progress: Callable[[int], None]) -> ScannedTree:
        """The capture of the tree at ``root``, as :func:`scan_tree` without ``cached`` makes it."""


def scan_tree(src: str | os.PathLike[str], *, read_links: bool = True,
              on_progress: Callable[[int], None] | None = None, cached: CacheHits | None = None,
              walker: Walker | None = None) -> ScannedTree:
    """Capture every entry under ``src`` (which must be a directory) before reading anything.

    A tree nested deeper than a path the kernel accepts (``PATH_MAX``, 4096 bytes) is refused with
    :class:`TreeTooDeepError` naming where: it could be published from inside but never restored
    by path, so it is not published at all. ``on_progress`` gets the number of entries captured so
    far after each directory. An entry ``cached`` answers for after its ``lstat`` goes to
    :attr:`ScannedTree.cached` with that answer, or to :attr:`ScannedTree.matched` if its whole listing
    matched: its xattrs, flags and link target are not read. ``walker`` walks instead of this module
    where no cache is asked (a cache's questions are Python's).
    """
    limit = file_size_limit()  # a setting that is no limit is refused before anything is read
    try:
        if walker is not None and cached is None:
            tree = walker(os.fspath(src), read_links=read_links, on_progress=on_progress or _ignore)
            if tree.entries.file_bytes() > limit:  # the usual tree: no entry made to learn that none is larger
                check_source_sizes(tree.entries, limit, root=tree.root)
            return tree
        return _scan_tree(os.fspath(src), read_links=read_links, on_progress=on_progress or _ignore,
                          cached=cached or _NoCache(), size_limit=limit)
    except OSError as err:
        if err.errno != errno.ENAMETOOLONG:
            raise
        raise too_deep(os.fspath(src), err) from err


def too_deep(src: str, err: OSError) -> TreeTooDeepError:
    """The refusal of a tree nested deeper than ``PATH_MAX`` (``err``: the ``ENAMETOOLONG`` that found it)."""
    where = os.fsdecode(err.filename) if err.filename is not None else src
    return TreeTooDeepError(
        f"source {src!r} is nested deeper than a path the kernel accepts (PATH_MAX, "
        f"{os.pathconf('/', 'PC_PATH_MAX')} bytes) at {where[:120]!r}...; artifacts hold trees whose "
        "every path fits", path=where)


def _ignore(count: int) -> None:
    pass


class _NoCache:
    def match_listing(self, relpaths: list[str], stats: list[os.stat_result], /) -> bool:
        return False

    def entry_line(self, path: str, st: os.stat_result, /) -> None:
        return None


@attrs.define
class _Scan:
    """What one scan has found so far."""

    root: str
    on_progress: Callable[[int], None]
    cached: CacheHits
    metas: list[FileMeta] = attrs.field(factory=list)
    identities: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    dir_flags: dict[str, int | None] = attrs.field(factory=dict)
    hits: dict[str, tuple[str, str | None]] = attrs.field(factory=dict)
    matched: list[str] = attrs.field(factory=list)
    captured_dirs: set[str] = attrs.field(factory=set)  # directories captured in full: their flags are read
    kept: dict[str, os.stat_result] = attrs.field(factory=dict)  # ScannedTree.kept
    link_stats: dict[str, os.stat_result] = attrs.field(factory=dict)  # captured links: checked after readlink
    refused: list[str] = attrs.field(factory=list)  # sockets: named all at once when the scan is done
    size_limit: int = 0  # file_size_limit(), read once before the scan
    oversized: tuple[str, int] | None = None  # the first file past it, in scan order, with its size

    def add(self, top: str, names: list[str], relpaths: list[str], stats: list[os.stat_result]) -> None:
        """Capture one directory's entries (``lstat`` already taken): as a whole if the cache matches the
        listing, else each a hit or a full capture. Its loops run once per entry, so they bind names once."""
        identities, limit = self.identities, self.size_limit
        for relpath, st in zip(relpaths, stats, strict=True):
            identities[relpath] = (st.st_dev, st.st_ino)
            # Every entry, the cache's hits too: a version over the limit would be one no download reads.
            if st.st_size > limit and self.oversized is None and stat.S_ISREG(st.st_mode):
                self.oversized = (relpath, st.st_size)
        if self.cached.match_listing(relpaths, stats):
            self.matched += relpaths
            # If they must be captured after all (their lines unreadable), directories and links are captured
            # from these lstats: by then the scan has listed them, or read a target their inode shares.
            self.kept.update((relpath, st) for relpath, st in zip(relpaths, stats, strict=True)
                             if not stat.S_ISREG(st.st_mode))
            return
        entry_line, hits, metas = self.cached.entry_line, self.hits, self.metas
        for name, relpath, st in zip(names, relpaths, stats, strict=True):
            hit = entry_line(relpath, st)
            if hit is None:
                try:
                    meta = meta_from_stat(relpath, st, owners=True, xattrs=source_xattrs(f"{top}/{name}"))
                except UnsupportedFileType:
                    self.refused.append(relpath)  # the rest is scanned so that the error names every one
                    continue
                metas.append(meta)
                if stat.S_ISDIR(st.st_mode):
                    self.captured_dirs.add(relpath)
                elif stat.S_ISLNK(st.st_mode):
                    self.link_stats[relpath] = st
            else:
                hits[relpath] = hit


def _scan_tree(root: str, *, read_links: bool, on_progress: Callable[[int], None],
               cached: CacheHits, size_limit: int) -> ScannedTree:
    st = named("lstat", os.lstat, root)
    if not stat.S_ISDIR(st.st_mode):
        raise not_a_directory(root)
    scan = _Scan(root, on_progress, cached, size_limit=size_limit)
    scan.add(root, [ROOT], [ROOT], [st])  # its xattrs from "root/.": a directory, whatever the form of root
    # Depth first, each directory's subdirectories in name order, by a stack rather than recursion: a tree
    # 1,500 levels deep fits in PATH_MAX and was a RecursionError.
    all_noatime, pending = True, [""]
    while pending:
        noatime, subdirs = _scan_dir(scan, pending.pop())
        all_noatime = all_noatime and noatime
        pending += reversed(subdirs)
    if scan.refused:
        raise unsupported(root, scan.refused)
    if scan.oversized:
        path, size = scan.oversized
        raise file_too_large(f"source {root!r}: {path!r} has", size, scan.size_limit, where=root)
    metas, identities, dir_flags = scan.metas, scan.identities, scan.dir_flags
    links = _hardlink_names(metas, identities)
    # One inode, one capture: a later name takes its first name's (they differ only where something moved the
    # inode between the two lstats, a reader its atime say; a manifest whose names disagree is refused).
    first_names = set(links.values())
    firsts = {meta.path: meta for meta in metas if meta.path in first_names}
    # Link targets only after every lstat: readlink moves the link's own atime.
    finished = []
    reader = LinkReader(root, identities)
    try:
        for meta in metas:
            first = firsts.get(links[meta.path]) if meta.path in links else None
            if meta.kind == "symlink" and read_links:
                finished.append(attrs.evolve(first or meta, path=meta.path, hardlink=links.get(meta.path),
                                             target=reader.target(meta.path, scan.link_stats[meta.path])))
            elif meta.kind == "dir":
                finished.append(attrs.evolve(meta, flags=dir_flags.get(meta.path)))
            elif first is not None:
                finished.append(attrs.evolve(first, path=meta.path, hardlink=links[meta.path]))
            else:
                finished.append(meta)
    finally:
        reader.close()
    return ScannedTree(root=root, entries=CapturedList(finished), identities=identities, listed_noatime=all_noatime,
                       cached=scan.hits, matched=scan.matched, kept=scan.kept)


def capture_again(tree: ScannedTree, path: str) -> FileMeta:
    """One entry of ``tree`` captured again as the scan captures it (``lstat``, owners, xattrs, a directory's
    flags, a link's target): an entry the stat cache answered for that must be captured after all (its blob
    is gone, or its recorded line cannot be read). The line is not parsed back: it is only as trusted as
    the cache. It must still be the inode the scan saw. A directory or link of a matched listing is captured
    from the scan's own ``lstat`` (:attr:`ScannedTree.kept`): the scan has listed it since, or read a target."""
    full = f"{tree.root}/{path}"
    now = named("lstat", os.lstat, full)
    _same_inode(tree, path, now)
    meta = meta_from_stat(path, tree.kept.get(path, now), owners=True, xattrs=source_xattrs(full))
    if meta.kind == "symlink":
        return attrs.evolve(meta, target=read_target(full, None, tree.kept.get(path, now), path, tree.root))
    if meta.kind == "dir":
        fd, _ = named("open", open_noatime, full, os.O_RDONLY | os.O_DIRECTORY)  # opened, never listed: its atime stays
        try:
            with naming(full):
                st = named("fstat", os.fstat, fd)
            _same_inode(tree, path, st)
            return attrs.evolve(meta, flags=named("ioctl", read_flags, fd, full))
        finally:
            os.close(fd)
    return meta


def _same_inode(tree: ScannedTree, path: str, st: os.stat_result) -> None:
    if (st.st_dev, st.st_ino) != tree.identities[path]:
        raise SourceChangedError(f"source entry {path!r} under {tree.root!r} was replaced while it was published; "
                                 "publish again once it is stable", path=path)


# The scan's refusals, written once for this walk and the native core's (:mod:`~artifactkit.engine.native_errors`).

def source_xattrs(path: str) -> Xattrs:
    try:
        return read_xattrs(path)
    except OSError as err:
        if err.errno in _NOT_THE_FILESYSTEM:
            raise
        raise xattrs_unreadable(path, err.errno or errno.EIO) from err


#: What ``llistxattr``/``lgetxattr`` answer about the entry itself (gone, or not ours to read), not the filesystem.
_NOT_THE_FILESYSTEM = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM})


def xattrs_unreadable(path: str, code: int) -> OSError:
    """The source's filesystem failed ``llistxattr``/``lgetxattr`` of ``path`` (rclone mount answers ``EIO``): said
    so, with the calls, where a bare "Input/output error" read as a failure of the file's content."""
    return OSError(code, f"the source's filesystem failed llistxattr/lgetxattr ({os.strerror(code)})", path)


def not_a_directory(root: str) -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, "publish source must be a directory (not a link to one)", root)


def unsupported(root: str, refused: list[str]) -> UnsupportedFileType:
    """Every socket (or other file no artifact holds) of the tree, named at once."""
    shown = ", ".join(repr(path) for path in refused[:20])
    more = f" and {len(refused) - 20} more" if len(refused) > 20 else ""
    return UnsupportedFileType(
        f"source {root!r} holds {len(refused)} socket(s) or other special file(s) an artifact cannot "
        f"hold (artifacts hold files, directories, symlinks, FIFOs and device nodes): {shown}{more}",
        path=refused[0], paths=refused)


def dir_replaced(root: str, rel: str, while_: str) -> SourceChangedError:
    """The directory ``rel`` is another inode than the one listed (``while_``: "scanned", "published")."""
    return SourceChangedError(f"source directory {rel!r} under {root!r} was replaced while it was {while_}; "
                              "publish again once it is stable", path=rel)


def vanished(root: str, gone: str) -> SourceChangedError:
    return SourceChangedError(f"source entry {gone!r} under {root!r} vanished while it was scanned; "
                              "publish again once it is stable", path=gone)


def link_changed(root: str, path: str) -> SourceChangedError:
    return SourceChangedError(f"source symlink {path!r} under {root!r} was retargeted or replaced while it was "
                              "published; publish again once it is stable", path=path)


class LinkReader:
    """Link targets through their directory's fd, opened once per directory (a directory's entries are
    consecutive in a scan) and checked to be the directory the scan listed."""

    def __init__(self, root: str, identities: dict[str, tuple[int, int]]) -> None:
        self.root, self.identities = root, identities
        self.parent: str | None = None
        self.fd = -1

    def target(self, path: str, before: os.stat_result) -> str:
        parent, _, name = path.rpartition("/")
        if parent != self.parent:
            self.close()
            where = f"{self.root}/{parent}" if parent else self.root
            self.fd = named("open", os.open, where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            self.parent = parent
            with naming(where):
                st = named("fstat", os.fstat, self.fd)
            if (st.st_dev, st.st_ino) != self.identities[parent or ROOT]:
                raise dir_replaced(self.root, parent or ROOT, "published")
        return read_target(name, self.fd, before, path, self.root)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd, self.parent = -1, None


def read_target(name: str, dir_fd: int | None, before: os.stat_result, path: str, root: str) -> str:
    """The target of the link ``name`` (under ``dir_fd``), which must still be the link ``before`` captured.

    A new link in its place (the only way to retarget one) has another inode or ctime; the size is the
    target's length, so a target read from anything else does not match it either.
    """
    try:
        target = named("readlink", os.readlink, name, dir_fd=dir_fd)
        now = named("lstat", os.lstat, name, dir_fd=dir_fd)
    except OSError as err:
        if err.errno not in (errno.ENOENT, errno.EINVAL):  # gone, or no longer a link
            raise
        now, target = None, ""
    if (now is None or (now.st_dev, now.st_ino, now.st_ctime_ns, now.st_mtime_ns, now.st_size)
            != (before.st_dev, before.st_ino, before.st_ctime_ns, before.st_mtime_ns, before.st_size)
            or now.st_size != len(os.fsencode(target))):
        raise link_changed(root, path)
    check_symlink_target(path, target, where=f"source {root!r}")
    return target


def _hardlink_names(metas: list[FileMeta], identities: dict[str, tuple[int, int]]) -> dict[str, str]:
    """Second and later names of one inode within the tree -> its first name in path order."""
    groups: dict[tuple[int, int], list[str]] = {}
    for meta in metas:
        if meta.kind in LINKABLE_KINDS and meta.nlink is not None and meta.nlink > 1:
            groups.setdefault(identities[meta.path], []).append(meta.path)
    return {path: min(names) for names in groups.values() if len(names) > 1 for path in names if path != min(names)}


def _scan_dir(scan: _Scan, rel: str) -> tuple[bool, list[str]]:
    """List and capture one directory: whether ``O_NOATIME`` held, and its subdirectories to scan next."""
    top = os.path.join(scan.root, rel) if rel else scan.root
    fd, noatime = named("open", open_noatime, top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # The path is opened by name, following any link in its components: it must still be the
        # directory captured from its parent's listing, or the scan would wander outside the tree.
        with naming(top):  # os.fstat(fd) names nothing, os.listdir(fd) the fd's number
            st = named("fstat", os.fstat, fd)
        if (st.st_dev, st.st_ino) != scan.identities[rel or ROOT]:
            raise dir_replaced(scan.root, rel or ROOT, "scanned")
        if (rel or ROOT) in scan.captured_dirs:
            scan.dir_flags[rel or ROOT] = named("ioctl", read_flags, fd, top)
        with naming(top):
            names = sorted(named("listdir", os.listdir, fd))
        prefix = f"{rel}/" if rel else ""
        relpaths = [prefix + name for name in names]
        try:
            stats = [named("lstat", os.lstat, name, dir_fd=fd) for name in names]
        except FileNotFoundError as err:  # listed, then gone: a race with whoever writes the source
            gone = prefix + os.fsdecode(err.filename) if err.filename is not None else rel or ROOT
            raise vanished(scan.root, gone) from err
        scan.add(top, names, relpaths, stats)
        subdirs = [relpath for relpath, child in zip(relpaths, stats, strict=True) if stat.S_ISDIR(child.st_mode)]
    finally:
        os.close(fd)
    scan.on_progress(len(scan.metas))
    return noatime, subdirs


def capture_tree(src: str | os.PathLike[str], *, hash_content: bool = True, read_links: bool = True) -> list[FileMeta]:
    """Capture a whole tree for comparison: lstat everything first, then (optionally) hash files.

    Content is read with ``O_NOATIME`` where allowed, after every capture, so hashing cannot
    move a time that was already recorded. Each file's flags and holes come from its fd before any
    read, also without ``hash_content``. ``read_links=False`` leaves link targets unread (``readlink``
    moves a link's atime, which a capture *before* a copy must not do).
    """
    tree = scan_tree(src, read_links=read_links)
    result = []
    for entry in tree.entries:
        if entry.kind != "file":
            result.append(entry)
            continue
        path = os.path.join(tree.root, entry.path)
        fd, _ = named("open", open_noatime, path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            # Flags and holes from the open fd, before its first read.
            flags, extents = named("ioctl", read_flags, fd, path), named("lseek", data_extents, fd, entry.size)
            sha = sha256_of_fd(fd)[0] if hash_content else None
        finally:
            os.close(fd)
        result.append(attrs.evolve(entry, sha256=sha, flags=flags, extents=extents))
    return result

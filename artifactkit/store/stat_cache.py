"""The opt-in stat cache for re-publishing an unchanged tree (``publish(..., stat_cache=True)``).

By default every byte of every file is hashed on every publish. With the cache, an entry whose ``lstat``
shows what an earlier publish into this store recorded is not captured or read again, as git's index
and DVC's state do. The cache is a file in the user's own cache directory, one per store
(:mod:`~artifactkit.store.stat_cache_file`), never in the store, whose other writers must not be able to edit
what this user trusts about their own source; it serves two kinds of hit:

* **An entry hit** (by path): the entry's ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, st_mode,
  st_uid, st_gid)`` are as recorded for that path. Its whole manifest line is the recorded one with
  this ``lstat``'s atime put in: its xattrs, ACLs, capabilities, inode flags and holes are not read
  again, a link's target is not read, and a file is neither opened nor hashed. A regular file with more
  than one link never takes it (its line names its first name within the tree, which other entries decide).
* **A content hit** (by inode): an entry captured in full (a renamed directory's files, a hard link)
  whose ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` were recorded takes that read's digest,
  inode flags and data extents without being opened.
* **An unchanged tree**: every directory's listing is the recorded one, every entry in it an entry hit
  with the atime its row holds (a row holds the atime of its line), compared a listing at a time
  (:meth:`StatCache.match_listing`); every row is matched, and the cache names the version whose manifest
  holds exactly its rows. That manifest is then this publish's, byte for byte: it is committed again once
  its bytes hash to its digest and its head says this publish's name and ``source_read_noatime``, and
  every blob the cache lists is still there. No line is built and no rest of a line is read.

What a hit trusts, precisely:

* **That no change to an inode leaves these values as they were.** ``ctime`` carries the weight: no
  syscall sets it to a chosen value; every write, truncate, hole punch, chmod/chown, xattr or ACL
  change, inode-flag change (``FS_IOC_SETFLAGS``), link, unlink and rename sets it to the kernel's
  clock. ``mtime`` alone is not trusted (``utime``/``touch -d`` set it freely). This fails for a writer
  that changes bytes without the kernel noticing: a shared writable ``mmap`` whose page is already
  dirty (the kernel stamps times at the first write fault after writeback), a raw block device write
  under the filesystem, or a filesystem that does not keep ctime (some FUSE and network filesystems
  fake it). It also assumes the realtime clock does not step back.
* **The racy rule** (git's, made stricter): an entry counts only if its mtime and ctime are older than
  the moment the publish that recorded it *started* (sampled before its ``lstat`` scan, from the clock
  the kernel stamps inodes with) by more than :data:`RACY_WINDOW_NS`. A file changed again within the
  same timestamp tick as it was hashed keeps its times; such an entry could lie, so it is hashed again
  (and trusted next time, once its times are old enough). git compares with the index file's write
  time; ours is taken before any read, and the 2 s window covers filesystems that store times in
  whole (FAT: even) seconds, where a change one tick later still reads as the same time.
* **That the store's blob is what its name says.** A hit is used only if ``blobs/<sha256>`` exists
  (checked under the store's lock, so ``gc`` cannot take it before the commit); its bytes are not
  re-read (``verify`` and every ``download`` hash them).
* **The cache file itself only as far as it proves itself.** It must be in the user's cache directory (a
  directory of the effective uid that no group or other can write, checked level by level, or
  :class:`~artifactkit.errors.UnsafeCacheError`), be a regular file of that uid, carry this schema, name
  this store (a local store's root by path, ``st_dev`` and ``st_ino``: a cache copied from another store or
  machine is foreign), name the same reader
  (:func:`~artifactkit.store.stat_cache_file.reader_identity`: ids, groups, effective capabilities, user
  namespace; a line holds the xattrs its reader could list, and ``trusted.*`` needs CAP_SYS_ADMIN) and
  carry the sha256 of its header and body (a torn, truncated or edited cache, its version pointer included,
  is corrupt): of the header and the part before the rests on every load, of the rests the first time one
  is needed.
  Anything else, or a body whose columns do not line up, and the whole cache is ignored: every file is
  hashed, nothing is trusted (a malformed row alone is a miss; rests that fail their checksum make every
  hit of a matched listing a miss, captured again before any read). The checksum
  detects accidents, not an adversary: only this user can write the cache, and a recorded line is not
  validated again (a cache this user edited with a recomputed checksum can commit a version that every
  download then refuses). A writer of the store cannot reach it: a ``stat-cache.json`` in a store's root
  (where older versions kept it) is never read.

A hit reads nothing, so the manifest's ``source_read_noatime`` speaks for this publish's reads only: a
reader who cannot use ``O_NOATIME`` on some files (not their owner) gets ``true`` from a publish that
read none of them, where a publish that read them says ``false``. Every other byte of the manifest is
what an uncached publish writes.

The cache holds the entries of the last publish that used it (alternating two trees re-hashes each).
It is a hint: it is written after the version is committed, without a flush (a crash leaves the
previous cache or a torn one, which is then ignored), and failing to write it never fails a publish.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import time
from collections.abc import Callable
from typing import Final

from artifactkit.engine.blob_check import HasBlob
from artifactkit.engine.ports import CachedRead
from artifactkit.errors import IntegrityError, UnsafeCacheError
from artifactkit.manifest.artifact_ref import ArtifactRef
from artifactkit.manifest.encode import ATIME_PREFIX, manifest_head
from artifactkit.manifest.tree_read import names_tree
from artifactkit.metadata.model import KIND_IFMT, FileMeta
from artifactkit.store.stat_cache_file import (
    CACHE_NAME,
    FIELDS,
    FIELDS_WIDTH,
    HIT_HEX,
    NONE,
    SHA,
    CacheFile,
    CacheSite,
    Row,
    digests_or_none,
    read_cache,
    write_cache,
)
from artifactkit.store.user_cache import opened as opened_user_cache

__all__ = ["CACHE_NAME", "RACY_WINDOW_NS", "StatCache", "inode_clock_ns"]

#: Entries changed this close to (or after) the start of the publish that recorded them are hashed again.
RACY_WINDOW_NS: Final = 2_000_000_000
# linux/time.h: the coarse realtime clock, which is what the kernel stamps inode times with
# (``current_time()``); the fine clock may run ahead of it by up to a tick.
CLOCK_REALTIME_COARSE: Final = 5
#: What a row's 64-bit time fields hold: an entry with a time past 2262 or before 1677 (the manifest keeps
#: those) is never a hit, and is captured and read again each publish.
_NS_LIMIT: Final = 2**63
_TYPE_BITS: Final = KIND_IFMT  # every kind a manifest holds, FIFOs and devices included
_S_IFMT: Final = 0o170000
_S_IFREG: Final = stat.S_IFREG
_S_IFDIR: Final = stat.S_IFDIR

Key = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
#: An entry hit: (manifest line, digest or ``None``).
Hit = tuple[str, "str | None"]


def inode_clock_ns() -> int:
    """Now, on the clock inode times are stamped with (before granularity truncation)."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)


def _content(sha: str, rest: str) -> CachedRead | None:
    """The digest, flags and extents a recorded file line carries, or ``None`` if it is malformed."""
    try:
        doc = json.loads(f"{ATIME_PREFIX}0{rest}")
        flags, runs = doc.get("flags"), doc.get("extents")
        extents = None if runs is None else tuple((a, b) for a, b in runs)
    except (ValueError, TypeError, AttributeError, RecursionError):  # RecursionError: a rest nested thousands deep
        return None
    if not SHA.fullmatch(sha) or not (flags is None or type(flags) is int):
        return None
    # Exactly ints, as a read records them: int() would take 1.5, "7" or Infinity (OverflowError) from an edit.
    if extents is not None and not all(type(start) is int and type(length) is int for start, length in extents):
        return None
    return CachedRead(sha, flags, extents)


class StatCache:
    """The cache of one publish: what the previous one recorded (``match_listing``, ``entry_line``, ``lookup``)
    and what this one keeps and finds (``record``), which ``save`` writes for the next."""

    def __init__(self, rows: dict[str, Row], trusted_before_ns: int, started_ns: int, *,
                 file: CacheFile | None = None) -> None:
        """``rows`` by path, or read from ``file`` when first needed."""
        self._file = file
        self._index: dict[str, int] | None = None  # row number by path, built on the first listing compared
        self._rows_read: dict[str, Row] | None = None if file is not None else rows
        self._by_inode: dict[Key, tuple[str, str]] | None = None  # built on the first content lookup
        self._trusted_before_ns = trusted_before_ns
        self.started_ns = started_ns
        self._next: dict[str, Row] = {}
        self._changed = False  # whether _next holds anything but rows read from the file, unchanged
        self._matched = 0  # entries whose listing matched whole (match_listing), not in _next
        self._reused = False  # whether this publish committed the recorded manifest (unchanged_manifest)
        #: An entry hit: ``entry_line(path, lstat)`` is ``(manifest line with that atime, digest or None)``,
        #: or ``None`` (capture it).
        self.entry_line: Callable[[str, os.stat_result], Hit | None] = self._first_entry_line

    @classmethod
    def load(cls, site: CacheSite | None, started_ns: int) -> StatCache:
        """The store's cache (``site``: ``None`` for a store not made yet), or an empty one if it is missing,
        corrupt or foreign; :class:`UnsafeCacheError` (before anything is read) if the user's cache directory
        or the store's directory in it is not the user's own, closed to others' writes."""
        if site is None:
            with opened_user_cache(create=False):  # checked now: the publish will write there
                return cls({}, 0, started_ns)
        try:
            file = read_cache(site)
        except UnsafeCacheError:
            raise
        except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
            # RecursionError: json.loads of a header nested thousands deep, before the checksum is checked.
            return cls({}, 0, started_ns)
        # git's rule takes the cache file's write time; the publish's start is earlier, so stricter.
        return cls({}, min(file.started_ns, file.mtime_ns) - RACY_WINDOW_NS, started_ns, file=file)

    @property
    def _rows(self) -> dict[str, Row]:
        if self._rows_read is None:
            self._rows_read = self._file.rows() if self._file is not None else {}  # only a file leaves it None
        return self._rows_read

    @property
    def recorded(self) -> dict[str, Row]:
        """What ``save`` would write: the rows this publish kept and recorded."""
        return dict(self._next)

    def _old_enough(self, mtime_ns: int, ctime_ns: int) -> bool:
        return mtime_ns < self._trusted_before_ns and ctime_ns < self._trusted_before_ns

    def match_listing(self, relpaths: list[str], stats: list[os.stat_result]) -> bool:
        """Whether one directory's entries (in scan order) are exactly as recorded, atimes too, each an entry
        hit: the recorded rows at those paths, consecutive, compared in one piece. ``False`` says nothing
        about any one entry: :meth:`entry_line` then decides each."""
        file = self._file
        if file is None or file.fields is None or not relpaths:
            return False
        if self._index is None:
            self._index = dict(zip(file.paths, range(len(file.paths)), strict=True))
        start = self._index.get(relpaths[0])
        if start is None:
            return False
        end = start + len(relpaths)
        if file.paths[start:end] != relpaths:
            return False
        trusted, pack, hexes, kinds = self._trusted_before_ns, FIELDS.pack, [], []
        try:
            for st in stats:
                mode, mtime, ctime = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
                regular = mode & _S_IFMT == _S_IFREG
                # One inode under several names is never a hit, whatever its kind: which name is the first (what
                # the others' lines name) can change with no ctime of it moving, as a rename of a parent does.
                if mtime >= trusted or ctime >= trusted or (st.st_nlink != 1 and mode & _S_IFMT != _S_IFDIR):
                    return False
                hexes.append(pack(st.st_dev, st.st_ino, st.st_size if regular else 0, mtime, ctime, mode,
                                  st.st_uid, st.st_gid, st.st_atime_ns).hex())
                kinds.append(regular)
        except struct.error:
            return False  # a value out of the recorded range: that entry decides for itself
        hexes.append("")
        if "\t".join(hexes) != file.fields[start * FIELDS_WIDTH:end * FIELDS_WIDTH]:
            return False
        # A regular file has a digest, nothing else has one.
        if [sha != NONE for sha in file.digests[start:end]] != kinds:
            return False
        self._matched += len(relpaths)
        return True

    def _first_entry_line(self, path: str, st: os.stat_result) -> Hit | None:
        self.entry_line = self._entry_hits()  # once the rows are read: a listing that did not match needs them
        return self.entry_line(path, st)

    def _entry_hits(self) -> Callable[[str, os.stat_result], Hit | None]:
        """:meth:`entry_line`: a closure over what it reads, since it runs once per entry of a changed listing:
        one dict lookup, the cheap integer checks first, one packed comparison, no method calls."""
        get, kept, trusted = self._rows.get, self._next, self._trusted_before_ns
        pack, prefix = FIELDS.pack, ATIME_PREFIX

        def entry_line(path: str, st: os.stat_result) -> Hit | None:
            row = get(path)
            if row is None:
                return None
            fields, sha, rest = row
            mode, mtime, ctime, atime = st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns
            regular = mode & _S_IFMT == _S_IFREG
            if (mtime >= trusted or ctime >= trusted or rest == NONE
                    or (st.st_nlink != 1 and mode & _S_IFMT != _S_IFDIR) or not -_NS_LIMIT <= atime < _NS_LIMIT):
                return None
            try:
                now = pack(st.st_dev, st.st_ino, st.st_size if regular else 0, mtime, ctime, mode, st.st_uid,
                           st.st_gid, atime).hex()
            except struct.error:
                return None  # a time no row can hold (before 1677): captured, and refused there by name
            if fields != now:
                if fields[:HIT_HEX] != now[:HIT_HEX]:
                    return None
                row = (now, sha, rest)  # only the atime moved: the row follows the line
                self._changed = True
            # A regular file has a digest (64 hex digits, checked on load), nothing else has one.
            if regular == (sha == NONE):
                return None
            kept[path] = row
            return f"{prefix}{atime}{rest}", sha if regular else None
        return entry_line

    def matched_lines(self, paths: list[str]) -> tuple[dict[str, Hit], list[str]]:
        """The entry hits of entries whose listing matched (:meth:`match_listing`): their recorded lines, and
        the paths whose rows cannot give one after all (rests corrupt or unusable), to capture again."""
        rows, hits, lost = self._rows, {}, []
        for path in paths:
            row = rows.get(path)
            if row is None or row[2] == NONE:
                lost.append(path)
                continue
            fields, sha, rest = row
            try:
                atime = FIELDS.unpack(bytes.fromhex(fields))[-1]  # as it is now: the listing matched
            except (ValueError, struct.error):
                lost.append(path)
                continue
            self._next[path] = row
            hits[path] = (f"{ATIME_PREFIX}{atime}{rest}", None if sha == NONE else sha)
        return hits, lost

    def unchanged_manifest(self, read_manifest: Callable[[ArtifactRef], bytes], name: str, entries: int,
                           source_read_noatime: bool, has_blob: HasBlob) -> tuple[bytes, str] | None:
        """The recorded version's manifest and digest if it is this publish's, byte for byte: every one of the
        tree's ``entries`` matched whole, the cache names a version of ``name`` holding exactly its rows, every
        blob is still there, and the manifest's bytes hash to its digest and say ``source_read_noatime``."""
        file = self._file
        if file is None or file.version is None or file.version[0] != name or entries != self._matched:
            return None
        if (self._matched != len(file.paths) or not digests_or_none(file.digests)
                or not all(has_blob(sha, None) for sha in file.digests if sha != NONE)):
            return None
        try:  # as every read of a manifest: a regular file, not followed, hashing to its name
            body = read_manifest(ArtifactRef(*file.version))
        except (OSError, ValueError, IntegrityError):
            return None
        if not (body.startswith(manifest_head(name, source_read_noatime))
                or names_tree(body, name, source_read_noatime)):
            return None
        self._reused = True
        return body, file.version[2]

    def forget(self, path: str) -> None:
        """An entry hit that cannot be used after all (its blob is gone): it is captured and read."""
        if self._next.pop(path, None) is not None:
            self._changed = True

    def lookup(self, entry: FileMeta, identity: tuple[int, int]) -> CachedRead | None:
        """A content hit: the recorded read of this exact, old-enough inode state, or ``None`` (hash it)."""
        if entry.kind != "file" or entry.ctime_ns is None or not self._old_enough(entry.mtime_ns, entry.ctime_ns):
            return None
        if self._by_inode is None:
            self._by_inode = _inode_index(self._rows)
        found = self._by_inode.get((identity[0], identity[1], entry.size, entry.mtime_ns, entry.ctime_ns))
        return None if found is None else _content(*found)

    def record(self, entry: FileMeta, identity: tuple[int, int], line: str) -> None:
        """Remember ``entry`` (as captured before its read, with what the read found) and its manifest line."""
        if entry.ctime_ns is None or entry.uid is None or entry.gid is None:
            return  # not a full capture: nothing to match the next lstat against
        head = f"{ATIME_PREFIX}{entry.atime_ns}"
        rest = line[len(head):]
        if not line.startswith(head) or rest[:1] not in (",", "}") or "\t" in rest or "\n" in rest:
            rest = NONE
        key = entry.path
        try:
            fields = FIELDS.pack(*identity, entry.size, entry.mtime_ns, entry.ctime_ns,
                                 _TYPE_BITS[entry.kind] | entry.mode, entry.uid, entry.gid, entry.atime_ns).hex()
        except struct.error:
            return  # a value no lstat could match
        row = (fields, entry.sha256 or NONE, rest)
        # A hard link is recorded anew each time, as it was: that alone changes nothing. A racy entry
        # recorded as it was does: only a newer start in the header makes it trusted next time.
        self._changed = (self._changed or self._rows.get(key) != row
                         or not self._old_enough(entry.mtime_ns, entry.ctime_ns))
        self._next[key] = row

    def save(self, site: CacheSite, ref: ArtifactRef, order: list[str]) -> None:
        """Replace the store's cache with this publish's entries, in scan ``order`` (every path of the tree),
        naming ``ref`` if its manifest holds exactly these rows; a failure only loses the hint.

        If every entry was a hit as recorded, the file already says all it would and is left as it is, unless
        every listing matched and the recorded manifest could not be committed again (another name, another
        ``source_read_noatime``, the manifest gone): then it names this version, which can be next time."""
        if self._reused or (not self._changed and len(self._next) == len(self._rows) and self._matched < len(order)):
            return
        rows = {path: self._next[path] for path in order if path in self._next}
        exact = len(rows) == len(order) and all(rest != NONE for _, _, rest in rows.values())
        write_cache(site, rows, self.started_ns, (ref.name, ref.version, ref.digest) if exact else None)


def _inode_index(rows: dict[str, Row]) -> dict[Key, tuple[str, str]]:
    """Recorded regular files by inode state -> (digest, rest of line); a malformed row is left out."""
    index: dict[Key, tuple[str, str]] = {}
    for fields, sha, rest in rows.values():
        if NONE in (sha, rest):
            continue
        try:
            packed = bytes.fromhex(fields)
            dev, ino, size, mtime, ctime, mode, _, _, _ = FIELDS.unpack(packed)
        except (ValueError, struct.error):
            continue
        if packed.hex() != fields:  # fromhex takes upper case and spaces; only what record writes counts
            continue
        if stat.S_ISREG(mode):
            index[(dev, ino, size, mtime, ctime)] = (sha, rest)
    return index

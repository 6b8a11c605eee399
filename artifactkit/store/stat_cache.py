"""The opt-in stat cache for re-publishing an unchanged tree (``publish(..., stat_cache=True)``).

By default every byte of every file is hashed on every publish. With the cache, an entry whose ``lstat``
shows what an earlier publish into this store recorded is not captured or read again, as git's index
and DVC's state do. The cache is ``ROOT/stat-cache.json``; it serves two kinds of hit:

* **An entry hit** (by path): the entry's ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, st_mode,
  st_uid, st_gid)`` are as recorded for that path. Its whole manifest line is the recorded one with
  this ``lstat``'s atime put in: its xattrs, ACLs, capabilities, inode flags and holes are not read
  again, a link's target is not read, and a file is neither opened nor hashed. A regular file with more
  than one link never takes it (its line names its first name within the tree, which other entries decide).
* **A content hit** (by inode): an entry captured in full (a renamed directory's files, a hard link)
  whose ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` were recorded takes that read's digest,
  inode flags and data extents without being opened.

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
* **The cache file itself only as far as it proves itself.** It must be a regular file, carry this
  schema, name this store's root directory by ``(st_dev, st_ino)`` (a cache copied from another store
  or machine is foreign), name the same reader (:func:`reader_identity`: ids, groups, effective
  capabilities, user namespace; a line holds the xattrs its reader could list, and ``trusted.*`` needs
  CAP_SYS_ADMIN) and carry the sha256 of its own body (a torn, truncated or edited cache is corrupt).
  Anything else, or a body whose columns do not line up, and the whole cache is ignored: every file is
  hashed, nothing is trusted (a malformed row alone is a miss). The checksum
  detects accidents, not an adversary: whoever can write the store can also rewrite its manifests, so
  the cache is exactly as trusted as the store directory (a recorded line is not validated again: an
  edited cache with a recomputed checksum can commit a version that every download then refuses).

A hit reads nothing, so the manifest's ``source_read_noatime`` speaks for this publish's reads only: a
reader who cannot use ``O_NOATIME`` on some files (not their owner) gets ``true`` from a publish that
read none of them, where a publish that read them says ``false``. Every other byte of the manifest is
what an uncached publish writes.

The cache holds the entries of the last publish that used it (alternating two trees re-hashes each).
It is a hint: it is written after the version is committed, without a flush (a crash leaves the
previous cache or a torn one, which is then ignored), and failing to write it never fails a publish.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Callable
from typing import Final

import attrs

from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.layout import StoreLayout
from artifactkit.store.manifest import ATIME_PREFIX

SCHEMA: Final = "artifactkit.stat-cache/3"
CACHE_NAME: Final = "stat-cache.json"
#: Entries changed this close to (or after) the start of the publish that recorded them are hashed again.
RACY_WINDOW_NS: Final = 2_000_000_000
# linux/time.h: the coarse realtime clock, which is what the kernel stamps inode times with
# (``current_time()``); the fine clock may run ahead of it by up to a tick.
CLOCK_REALTIME_COARSE: Final = 5
MAX_CACHE_BYTES: Final = 1 << 30
_SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)
_HEX_DIGITS: Final = b"0123456789abcdef"
_NS_LIMIT: Final = 2**63
_TYPE_BITS: Final = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}
_NONE: Final = "-"
_S_IFMT: Final = 0o170000
_S_IFREG: Final = stat.S_IFREG
_TAB: Final = "\t"

Key = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
#: A recorded entry: (the hex of its eight ``lstat`` values packed by :data:`_FIELDS`, digest or ``-``, rest or ``-``).
Row = tuple[str, str, str]
#: st_dev, st_ino, size (0 unless a regular file), st_mtime_ns, st_ctime_ns, st_mode, st_uid, st_gid. Compared
#: packed in hex: formatting eight ints per entry as text cost 1.5 us of a 4 us hit, ``pack().hex()`` 0.4 us,
#: and the hex is compared as it was read (decoding 10,000 rows of it on load took 2.4 ms).
_FIELDS: Final = struct.Struct("<QQqqqQQQ")
# The body is the paths as one JSON array, then a column each of fields (hex), digests (``-`` for none) and
# rests (the entry's manifest line after its atime, ``-`` for none), every part followed by a tab (see body_of).
# Every part is ASCII without a tab or newline (JSON escapes them), so a load is one split, one JSON decode of
# all paths and a dict, and an unchanged tree leaves the file alone: no per-entry JSON either way (that was
# 85 ms of a 10,000-file re-publish), no split into rows and no per-row checks (20 ms, now 8).


@attrs.frozen
class CachedRead:
    """What an earlier read of an unchanged file found: its digest, inode flags and data extents."""

    sha256: str
    flags: int | None
    extents: Extents | None


def inode_clock_ns() -> int:
    """Now, on the clock inode times are stamped with (before granularity truncation)."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)


def _store_identity(layout: StoreLayout) -> list[int]:
    st = os.stat(layout.root)
    return [st.st_dev, st.st_ino]


def reader_identity() -> list[object]:
    """Who reads the source, as far as it changes what a capture sees: ids and groups (which files open,
    whether ``O_NOATIME`` is allowed), effective capabilities (``trusted.*`` xattrs are listed only with
    CAP_SYS_ADMIN) and the user namespace (which translates ACLs and file capabilities).

    A recorded line holds the xattrs its reader saw; another reader's publish must capture for itself.
    """
    caps = ""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii", errors="replace") as status:
        caps = next((line.split()[1] for line in status if line.startswith("CapEff:")), "")
    try:
        userns = os.stat("/proc/self/ns/user")
        namespace = [userns.st_dev, userns.st_ino]
    except OSError:
        namespace = []
    return [os.geteuid(), os.getegid(), sorted(os.getgroups()), caps, namespace]


def _content(sha: str, rest: str) -> CachedRead | None:
    """The digest, flags and extents a recorded file line carries, or ``None`` if it is malformed."""
    try:
        doc = json.loads(f"{ATIME_PREFIX}0{rest}")
        flags, runs = doc.get("flags"), doc.get("extents")
        extents = None if runs is None else tuple((a, b) for a, b in runs)
    except (ValueError, TypeError, AttributeError, RecursionError):  # RecursionError: a rest nested thousands deep
        return None
    if not _SHA.fullmatch(sha) or not (flags is None or type(flags) is int):
        return None
    # Exactly ints, as a read records them: int() would take 1.5, "7" or Infinity (OverflowError) from an edit.
    if extents is not None and not all(type(start) is int and type(length) is int for start, length in extents):
        return None
    return CachedRead(sha, flags, extents)


class StatCache:
    """The cache of one publish: what the previous one recorded (``entry_line``, ``lookup``) and what this
    one keeps and finds (``record``), which ``save`` writes for the next."""

    def __init__(self, rows: dict[str, Row], trusted_before_ns: int, started_ns: int) -> None:
        self._rows = rows
        self._by_inode: dict[Key, tuple[str, str]] | None = None  # built on the first content lookup
        self._trusted_before_ns = trusted_before_ns
        self.started_ns = started_ns
        self._next: dict[str, Row] = {}
        self._changed = False  # whether _next holds anything but rows read from the file, unchanged
        #: An entry hit: ``entry_line(path, lstat)`` is ``(manifest line with that atime, digest or None)``,
        #: or ``None`` (capture it).
        self.entry_line = self._entry_hits()

    @classmethod
    def load(cls, layout: StoreLayout, started_ns: int) -> StatCache:
        """The store's cache, or an empty one if it is missing, corrupt or foreign (never an error)."""
        try:
            rows, trusted_before = _read(layout)
        except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
            # RecursionError: json.loads of a header nested thousands deep, before the checksum is checked.
            rows, trusted_before = {}, 0
        return cls(rows, trusted_before, started_ns)

    @property
    def recorded(self) -> dict[str, Row]:
        """What ``save`` would write: the rows this publish kept and recorded."""
        return dict(self._next)

    def _old_enough(self, mtime_ns: int, ctime_ns: int) -> bool:
        return mtime_ns < self._trusted_before_ns and ctime_ns < self._trusted_before_ns

    def _entry_hits(self) -> Callable[[str, os.stat_result], tuple[str, str | None] | None]:
        """:attr:`entry_line`: a closure over what it reads, since it runs once per entry of the tree: one dict
        lookup, the cheap integer checks first, one packed comparison of all eight values, no method calls."""
        get, kept, trusted = self._rows.get, self._next, self._trusted_before_ns
        pack, prefix = _FIELDS.pack, ATIME_PREFIX

        def entry_line(path: str, st: os.stat_result) -> tuple[str, str | None] | None:
            row = get(path)
            if row is None:
                return None
            fields, sha, rest = row
            mode, mtime, ctime = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
            regular = mode & _S_IFMT == _S_IFREG
            if (mtime >= trusted or ctime >= trusted or rest == _NONE or (regular and st.st_nlink != 1)
                    or fields != pack(st.st_dev, st.st_ino, st.st_size if regular else 0, mtime, ctime, mode,
                                      st.st_uid, st.st_gid).hex()):
                return None
            atime = st.st_atime_ns
            # A regular file has a digest (64 hex digits, checked on load), nothing else has one.
            if not -_NS_LIMIT <= atime < _NS_LIMIT or regular == (sha == _NONE):
                return None
            kept[path] = row
            return f"{prefix}{atime}{rest}", sha if regular else None
        return entry_line

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
            rest = _NONE
        key = entry.path
        try:
            fields = _FIELDS.pack(*identity, entry.size, entry.mtime_ns, entry.ctime_ns,
                                  _TYPE_BITS[entry.kind] | entry.mode, entry.uid, entry.gid).hex()
        except struct.error:
            return  # a value no lstat could match
        row = (fields, entry.sha256 or _NONE, rest)
        # A hard link is recorded anew each time, as it was: that alone changes nothing. A racy entry
        # recorded as it was does: only a newer start in the header makes it trusted next time.
        self._changed = (self._changed or self._rows.get(key) != row
                         or not self._old_enough(entry.mtime_ns, entry.ctime_ns))
        self._next[key] = row

    def save(self, layout: StoreLayout) -> None:
        """Replace the store's cache with this publish's entries; a failure only loses the hint.

        If every entry was a hit (an unchanged tree), the file already says all it would: it is left as it is."""
        if not self._changed and len(self._next) == len(self._rows):
            return
        body = body_of(self._next).encode("ascii")
        head = json.dumps({"schema": SCHEMA, "store": _store_identity(layout), "reader": reader_identity(),
                           "started_ns": self.started_ns, "sha256": hashlib.sha256(body).hexdigest()},
                          sort_keys=True).encode()
        temp = os.path.join(layout.staging_dir, f"stat-cache-{os.getpid()}-{secrets.token_hex(8)}")
        try:
            with open(temp, "xb") as handle:
                handle.write(head + b"\n" + body)
            os.replace(temp, os.path.join(layout.root, CACHE_NAME))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _inode_index(rows: dict[str, Row]) -> dict[Key, tuple[str, str]]:
    """Recorded regular files by inode state -> (digest, rest of line); a malformed row is left out."""
    index: dict[Key, tuple[str, str]] = {}
    for fields, sha, rest in rows.values():
        if _NONE in (sha, rest):
            continue
        try:
            packed = bytes.fromhex(fields)
            dev, ino, size, mtime, ctime, mode, _, _ = _FIELDS.unpack(packed)
        except (ValueError, struct.error):
            continue
        if packed.hex() != fields:  # fromhex takes upper case and spaces; only what record writes counts
            continue
        if stat.S_ISREG(mode):
            index[(dev, ino, size, mtime, ctime)] = (sha, rest)
    return index


def body_of(rows: dict[str, Row]) -> str:
    """The file's body for ``rows``: the paths as one JSON array, then every row's fields, then every digest,
    then every rest, each part followed by a tab and the whole by a newline (so a load is one split)."""
    if not rows:
        return ""
    fields, shas, rests = zip(*rows.values(), strict=True)
    return _TAB.join([json.dumps(list(rows)), *fields, *shas, *rests, "\n"])


def _rows(text: str) -> dict[str, Row]:
    """The body's rows by path. A body whose parts do not add up is ignored whole (no row can be placed);
    a row whose digest is not 64 hex digits or ``-`` is left out (a miss), and so are malformed fields (no
    ``lstat`` packs to them)."""
    if not text:
        return {}
    parts = text.split(_TAB)
    try:
        paths = json.loads(parts[0])
    except ValueError:
        return {}
    # One newline, the last part: no part holds one (record writes none; JSON escapes them in paths).
    if not isinstance(paths, list) or len(parts) != 3 * len(paths) + 2 or parts[-1] != "\n" or text.count("\n") != 1:
        return {}
    count = len(paths)
    shas = parts[count + 1:2 * count + 1]
    columns = zip(parts[1:count + 1], shas, parts[2 * count + 1:-1], strict=True)
    if not all(isinstance(path, str) for path in paths):
        return {}
    if _digests_or_none(shas):
        return dict(zip(paths, columns, strict=True))
    return {path: row for path, row in zip(paths, columns, strict=True) if row[1] == _NONE or _SHA.fullmatch(row[1])}


def _digests_or_none(shas: list[str]) -> bool:
    """Whether every item is 64 lowercase hex digits or ``-``, checked in C (a regex per item took 7 ms
    of 10,000): every length is 64 or it is ``-``, and only those dashes survive deleting hex digits."""
    dashes = shas.count(_NONE)
    return (list(map(len, shas)).count(64) + dashes == len(shas)
            and "".join(shas).encode("ascii").translate(None, _HEX_DIGITS) == b"-" * dashes)


def _read(layout: StoreLayout) -> tuple[dict[str, Row], int]:
    fd = os.open(os.path.join(layout.root, CACHE_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
            raise ValueError("not a cache file")
        data = handle.read()
    # A view, not a partition: a copy of a 5 MB body costs as much as its checksum.
    split = data.find(b"\n") + 1 or len(data)
    head, body = json.loads(data[:split]), memoryview(data)[split:]
    if (not isinstance(head, dict) or head.get("schema") != SCHEMA
            or head.get("sha256") != hashlib.sha256(body).hexdigest() or head.get("store") != _store_identity(layout)
            or head.get("reader") != reader_identity()):
        raise ValueError("corrupt or foreign stat cache, or recorded by another reader")
    started = head["started_ns"]
    if type(started) is not int:
        raise TypeError("started_ns")
    rows = _rows(str(body, "ascii")) if body else {}
    # git's rule takes the cache file's write time; the publish's start is earlier, so stricter.
    return rows, min(started, st.st_mtime_ns) - RACY_WINDOW_NS

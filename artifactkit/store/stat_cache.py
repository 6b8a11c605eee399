"""The opt-in stat cache for re-publishing an unchanged tree (``publish(..., stat_cache=True)``).

By default every byte of every file is hashed on every publish. With the cache, a file whose
``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` equals what an earlier publish into this store
recorded takes that publish's digest (and the inode flags and data extents its read found) without being
opened, as git's index and DVC's state do. The cache is ``ROOT/stat-cache.json``.

What a hit trusts, precisely:

* **That no write to a file leaves all five values as they were.** ``ctime`` carries the weight: no
  syscall sets it to a chosen value; every write, truncate, hole punch, chmod/chown/xattr/flags change
  and rename sets it to the kernel's clock. ``mtime`` alone is not trusted (``utime``/``touch -d``
  set it freely). This fails for a writer that changes bytes without the kernel noticing: a shared
  writable ``mmap`` whose page is already dirty (the kernel stamps times at the first write fault after
  writeback), a raw block device write under the filesystem, or a filesystem that does not keep ctime
  (some FUSE and network filesystems fake it). It also assumes the realtime clock does not step back.
* **The racy rule** (git's, made stricter): an entry counts only if its mtime and ctime are older than
  the moment the publish that recorded it *started* (sampled before its ``lstat`` scan, from the clock
  the kernel stamps inodes with) by more than :data:`RACY_WINDOW_NS`. A file changed again within the
  same timestamp tick as it was hashed keeps its times; such an entry could lie, so it is hashed again
  (and trusted next time, once its times are old enough). git compares with the index file's write
  time; ours is taken before any read, and the 2 s window covers filesystems that store times in
  whole (FAT: even) seconds, where a change one tick later still reads as the same time.
* **That the store's blob is what its name says.** A hit is used only if ``blobs/<sha256>`` exists;
  its bytes are not re-read (``verify`` and every ``download`` hash them).
* **The cache file itself only as far as it proves itself.** It must be a regular file, carry this
  schema, name this store's root directory by ``(st_dev, st_ino)`` (a cache copied from another store
  or machine is foreign) and carry the sha256 of its own body (a torn, truncated or edited cache is
  corrupt). Anything else and the whole cache is ignored: every file is hashed, nothing is trusted.
  The checksum detects accidents, not an adversary: whoever can write the store can also rewrite its
  manifests, so the cache is exactly as trusted as the store directory.

The cache holds the files of the last publish that used it (alternating two trees re-hashes each).
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
import time
from typing import Final

import attrs

from artifactkit.metadata.model import Extents, FileMeta
from artifactkit.store.layout import StoreLayout

SCHEMA: Final = "artifactkit.stat-cache/1"
CACHE_NAME: Final = "stat-cache.json"
#: Entries changed this close to (or after) the start of the publish that recorded them are hashed again.
RACY_WINDOW_NS: Final = 2_000_000_000
# linux/time.h: the coarse realtime clock, which is what the kernel stamps inode times with
# (``current_time()``); the fine clock may run ahead of it by up to a tick.
CLOCK_REALTIME_COARSE: Final = 5
MAX_CACHE_BYTES: Final = 1 << 30
_SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)

Key = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


@attrs.frozen
class CachedRead:
    """What an earlier read of an unchanged file found: its digest, inode flags and data extents."""

    sha256: str
    flags: int | None
    extents: Extents | None


def inode_clock_ns() -> int:
    """Now, on the clock inode times are stamped with (before granularity truncation)."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)


def _key(entry: FileMeta, identity: tuple[int, int]) -> Key | None:
    if entry.kind != "file" or entry.ctime_ns is None:
        return None
    return (identity[0], identity[1], entry.size, entry.mtime_ns, entry.ctime_ns)


def _store_identity(layout: StoreLayout) -> list[int]:
    st = os.stat(layout.root)
    return [st.st_dev, st.st_ino]


class StatCache:
    """The cache of one publish: what the previous one recorded (``lookup``) and what this one finds (``record``)."""

    def __init__(self, known: dict[Key, CachedRead], trusted_before_ns: int, started_ns: int) -> None:
        self._known = known
        self._trusted_before_ns = trusted_before_ns
        self.started_ns = started_ns
        self._found: dict[Key, CachedRead] = {}
        self.hits = 0

    @classmethod
    def load(cls, layout: StoreLayout, started_ns: int) -> StatCache:
        """The store's cache, or an empty one if it is missing, corrupt or foreign (never an error)."""
        try:
            known, trusted_before = _read(layout)
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            known, trusted_before = {}, 0
        return cls(known, trusted_before, started_ns)

    def lookup(self, entry: FileMeta, identity: tuple[int, int]) -> CachedRead | None:
        """The recorded read of this exact, old-enough inode state, or ``None`` (hash it)."""
        key = _key(entry, identity)
        if key is None or entry.mtime_ns >= self._trusted_before_ns or key[4] >= self._trusted_before_ns:
            return None
        return self._known.get(key)

    def record(self, entry: FileMeta, identity: tuple[int, int], read: CachedRead) -> None:
        """Remember what this publish found for ``entry`` (as captured before its read)."""
        key = _key(entry, identity)
        if key is not None:
            self._found[key] = read

    def save(self, layout: StoreLayout) -> None:
        """Replace the store's cache with this publish's findings; a failure only loses the hint."""
        # One line of header (schema, store, start, the body's sha256), then the body: one C-encoded JSON
        # list, hashed as bytes (json.dump to a file would encode item by item in Python: 10x slower).
        body = json.dumps([[*key, r.sha256, r.flags, r.extents] for key, r in self._found.items()],
                          separators=(",", ":")).encode()
        head = json.dumps({"schema": SCHEMA, "store": _store_identity(layout), "started_ns": self.started_ns,
                           "sha256": hashlib.sha256(body).hexdigest()}, sort_keys=True).encode()
        temp = os.path.join(layout.staging_dir, f"stat-cache-{os.getpid()}-{secrets.token_hex(8)}")
        try:
            with open(temp, "xb") as handle:
                handle.write(head + b"\n" + body)
            os.replace(temp, os.path.join(layout.root, CACHE_NAME))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _read(layout: StoreLayout) -> tuple[dict[Key, CachedRead], int]:
    fd = os.open(os.path.join(layout.root, CACHE_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
            raise ValueError("not a cache file")
        head_line, _, body = handle.read().partition(b"\n")
    head = json.loads(head_line)
    if (not isinstance(head, dict) or head.get("schema") != SCHEMA
            or head.get("sha256") != hashlib.sha256(body).hexdigest() or head.get("store") != _store_identity(layout)):
        raise ValueError("corrupt or foreign stat cache")
    started = head["started_ns"]
    if type(started) is not int:
        raise TypeError("started_ns")
    known: dict[Key, CachedRead] = {}
    for dev, ino, size, mtime, ctime, sha, flags, extents in json.loads(body):
        # The digest names a file under blobs/: never anything but 64 hex digits. Keys of another type
        # simply never equal an lstat's ints.
        if not (isinstance(sha, str) and _SHA.fullmatch(sha)) or not (flags is None or type(flags) is int):
            raise ValueError("malformed stat cache entry")
        runs = None if extents is None else tuple((int(a), int(b)) for a, b in extents)
        known[(dev, ino, size, mtime, ctime)] = CachedRead(sha, flags, runs)
    # git's rule takes the cache file's write time; the publish's start is earlier, so stricter.
    return known, min(started, st.st_mtime_ns) - RACY_WINDOW_NS

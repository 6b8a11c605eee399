"""The stat cache's file, ``stat-cache.json`` in the user's cache directory: where, how laid out, read and written.

:mod:`~artifactkit.store.stat_cache` says what a hit trusts; this module only keeps the bytes honest.

Each store's cache is in a directory of its own in the user's cache directory (:mod:`~artifactkit.store.user_cache`,
checked to be the user's own and closed to others' writes): a local store's in ``local-stat-cache/<digest>``, the
digest of its root's absolute path, ``st_dev`` and ``st_ino`` (a store made again at the same path, or another
store on a reused inode, starts a cache of its own; one store reached by two paths has two, which costs one full
read each); a bucket store's in ``s3-stat-cache/<digest of its URL>``. The cache says what the *source* looked
like to this user on this machine: it used to be ``ROOT/stat-cache.json``, where every writer of the store could
rewrite it, recompute its checksums and point a victim's next publish at bytes of their own. A
``stat-cache.json`` an older version left in a store's root is never read (the layout tolerates the name).
The file is a JSON header line, then a body of four parts, each item followed by a tab and the whole by a
newline: the paths as one JSON array, a column of fields (:data:`FIELDS` in hex, fixed width), a column of
digests (``-`` for none) and a column of rests (an entry's manifest line after its atime, ``-`` for none).
Every part is ASCII without a tab or newline (JSON escapes them), so a load is one split.

The rests are more than half of the file and an unchanged tree needs none of them (its manifest is the
recorded version's, see :meth:`StatCache.unchanged_manifest`), so the header carries two checksums: one of
the header itself and everything before the rests, checked on every load, and one of the rests, checked the
first time one is needed. Rows are in the order the scan meets their paths, so one directory's rows are
consecutive and an unchanged listing is compared in one piece (:meth:`StatCache.match_listing`).
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
from typing import Final

import attrs

from artifactkit.store import user_cache

SCHEMA: Final = "artifactkit.stat-cache/4"
CACHE_NAME: Final = "stat-cache.json"
MAX_CACHE_BYTES: Final = 1 << 30
NONE: Final = "-"
TAB: Final = "\t"
SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)
_HEX_DIGITS: Final = b"0123456789abcdef"
_HEAD_READ: Final = 1 << 16  # the header line is a few hundred bytes: one read takes it and a small body

#: st_dev, st_ino, size (0 unless a regular file), st_mtime_ns, st_ctime_ns, st_mode, st_uid, st_gid, st_atime_ns.
#: Compared packed in hex: formatting nine ints per entry as text cost 1.5 us of a 4 us hit, ``pack().hex()``
#: 0.4 us, and the hex is compared as it was read. The atime comes last: the first eight decide a hit, all
#: nine whether the recorded manifest line is still the line, atime and all.
FIELDS: Final = struct.Struct("<QQqqqQQQq")
#: Hex digits of the eight values that decide a hit.
HIT_HEX: Final = 2 * (FIELDS.size - 8)
#: One row of the fields column: its hex digits and the tab after them.
FIELDS_WIDTH: Final = 2 * FIELDS.size + 1

#: A recorded entry: (:data:`FIELDS` in hex, digest or ``-``, rest or ``-``).
Row = tuple[str, str, str]


@attrs.frozen
class CacheFile:
    """A cache file that proved itself: its header checked and the part before the rests checksummed."""

    paths: list[str]
    #: The fields column as one string, :data:`FIELDS_WIDTH` characters a row (``None``: not laid out so).
    fields: str | None
    digests: list[str]
    #: The recorded version whose manifest holds exactly these rows' entries: (name, version, digest).
    version: tuple[str, int, str] | None
    started_ns: int
    mtime_ns: int
    _text: str  # the part before the rests, for the rows
    #: Where the rests are: the file (by path and identity), their offset and length, and their checksum.
    _rests_at: tuple[str, tuple[int, int], int, int, str]

    def rows(self) -> dict[str, Row]:
        """Every well-formed row by path; nothing if the rests are gone, fail their checksum or do not line up.

        The rests are read only now: an unchanged tree never needs them (half the file, and its checksum)."""
        path, identity, offset, length, sha256 = self._rests_at
        try:
            rests = _read_at(path, identity, offset, length)
        except OSError:
            return {}  # the file was replaced or removed since it was loaded: these rows cannot be checked
        if len(rests) != length or hashlib.sha256(rests).hexdigest() != sha256:
            return {}
        try:
            return parse_rows(self._text + str(rests, "ascii"))
        except UnicodeDecodeError:
            return {}  # checksummed but not what write_cache writes: an edit


@attrs.frozen
class CacheSite:
    """Where a store's stat cache lives: its directory below the user's cache directory (``parts``), and how the
    cache's header names the store (``store``: a cache copied from another store is foreign)."""

    parts: tuple[str, ...]
    store: list[object]

    @property
    def where(self) -> str | None:
        """The cache directory's path (``None``: the user has no cache directory)."""
        return user_cache.path_of(*self.parts)


def _digest(identity: list[object]) -> str:
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]


def local_site(root: str, st: os.stat_result) -> CacheSite:
    """The site of the local store at the absolute path ``root`` whose root directory is ``st``."""
    identity: list[object] = [root, st.st_dev, st.st_ino]
    return CacheSite(("local-stat-cache", _digest(identity)), identity)


def bucket_site(url: str) -> CacheSite:
    """The site of the bucket store at the normalised ``url`` (named as before the local store's moved here)."""
    return CacheSite(("s3-stat-cache", hashlib.sha256(url.encode()).hexdigest()[:32]), [url])


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


def reader_digest() -> str:
    """:func:`reader_identity` as the header holds it: a digest, since the groups alone can be 65,536 ids
    and the header must fit the one read that takes it."""
    return hashlib.sha256(json.dumps(reader_identity()).encode()).hexdigest()


def body_of(rows: dict[str, Row]) -> str:
    """The file's body for ``rows``, in their order (see the module's docstring)."""
    if not rows:
        return ""
    fields, shas, rests = zip(*rows.values(), strict=True)
    return TAB.join([json.dumps(list(rows)), *fields, *shas, *rests, "\n"])


def parse_rows(text: str) -> dict[str, Row]:
    """The body's rows by path. A body whose parts do not add up is ignored whole (no row can be placed);
    a row whose digest is not 64 hex digits or ``-`` is left out (a miss), and so are malformed fields (no
    ``lstat`` packs to them)."""
    if not text:
        return {}
    parts = text.split(TAB)
    try:
        paths = json.loads(parts[0])
    except (ValueError, RecursionError):  # RecursionError: an array nested thousands deep
        return {}
    # One newline, the last part: no part holds one (record writes none; JSON escapes them in paths).
    if not isinstance(paths, list) or len(parts) != 3 * len(paths) + 2 or parts[-1] != "\n" or text.count("\n") != 1:
        return {}
    count = len(paths)
    shas = parts[count + 1:2 * count + 1]
    columns = zip(parts[1:count + 1], shas, parts[2 * count + 1:-1], strict=True)
    if not all(isinstance(path, str) for path in paths):
        return {}
    if digests_or_none(shas):
        return dict(zip(paths, columns, strict=True))
    return {path: row for path, row in zip(paths, columns, strict=True) if row[1] == NONE or SHA.fullmatch(row[1])}


def digests_or_none(shas: list[str]) -> bool:
    """Whether every item is 64 lowercase hex digits or ``-``, checked in C (a regex per item took 7 ms
    of 10,000): every length is 64 or it is ``-``, and only those dashes survive deleting hex digits."""
    dashes = shas.count(NONE)
    return (list(map(len, shas)).count(64) + dashes == len(shas)
            and "".join(shas).encode("ascii").translate(None, _HEX_DIGITS) == b"-" * dashes)


def _open_cache(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)


def _read_at(path: str, identity: tuple[int, int], offset: int, length: int) -> bytes:
    fd = _open_cache(path)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != identity:
            raise FileNotFoundError(path)
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def read_cache(site: CacheSite) -> CacheFile:
    """The store's cache file, checked up to its rests (:class:`~artifactkit.errors.UnsafeCacheError` if the user's
    cache directory or the store's directory in it is not the user's own; any defect of the file raises OSError,
    ValueError, TypeError, KeyError or RecursionError, which the caller treats as "no cache")."""
    with user_cache.opened(*site.parts, create=False) as dir_fd:
        if dir_fd is None or site.where is None:
            raise FileNotFoundError(f"no stat cache directory {site.where}")
        path = os.path.join(site.where, CACHE_NAME)
        try:
            fd = os.open(CACHE_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as err:
            raise FileNotFoundError(path) from err  # not an UnsafeCacheError: the caller's "no cache"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES or st.st_uid != os.geteuid():
            raise ValueError("not a cache file")
        first = os.pread(fd, _HEAD_READ, 0)
        split = first.find(b"\n") + 1
        if not split:
            raise ValueError("no header line")
        head = json.loads(first[:split])
        if (not isinstance(head, dict) or head.get("schema") != SCHEMA or head.get("store") != site.store
                or head.get("reader") != reader_digest()):
            raise ValueError("foreign stat cache, or recorded by another reader")
        started, rests_at, version = head["started_ns"], head["rests_at"], head["version"]
        if type(started) is not int or type(rests_at) is not int or not 0 <= rests_at <= st.st_size - split:
            raise TypeError("started_ns, rests_at")
        # Up to the rests only: one read of what every load needs.
        before = first[split:split + rests_at] if split + rests_at <= len(first) else os.pread(fd, rests_at, split)
    finally:
        os.close(fd)
    if len(before) != rests_at or head["sha256"] != checksum(head, before):
        raise ValueError("corrupt stat cache")
    if type(head["rests_sha256"]) is not str:
        raise TypeError("rests_sha256")
    text = str(before, "ascii")
    paths_end = text.find(TAB)
    paths = json.loads(text[:paths_end]) if text else []
    if not isinstance(paths, list) or not all(type(path) is str for path in paths) or "\n" in text:
        raise ValueError("corrupt stat cache")
    fields_end = paths_end + 1 + len(paths) * FIELDS_WIDTH
    column = text[paths_end + 1:fields_end]
    # Not one row per FIELDS_WIDTH: only the row-by-row comparison applies.
    fixed_width = column[FIELDS_WIDTH - 1::FIELDS_WIDTH] == TAB * len(paths)
    fields, digests = (column, text[fields_end:].split(TAB)[:-1]) if fixed_width else (None, [])
    if not (isinstance(version, list) and len(version) == 3 and type(version[0]) is str
            and type(version[1]) is int and type(version[2]) is str) or len(digests) != len(paths):
        version = None
    return CacheFile(paths, fields, digests, None if version is None else (version[0], version[1], version[2]),
                     started, st.st_mtime_ns, text,
                     (path, (st.st_dev, st.st_ino), split + rests_at, st.st_size - split - rests_at,
                      head["rests_sha256"]))


def checksum(head: dict[str, object], before_rests: bytes) -> str:
    """The sha256 of the header (but this value) and of the body up to the rests: an edited version pointer,
    start time or rests checksum is as corrupt as an edited row."""
    fields = json.dumps({key: value for key, value in head.items() if key != "sha256"}, sort_keys=True)
    return hashlib.sha256(fields.encode() + b"\n" + before_rests).hexdigest()


def write_cache(site: CacheSite, rows: dict[str, Row], started_ns: int,
                version: tuple[str, int, str] | None) -> None:
    """Replace the store's cache with ``rows``; a failure (no usable cache directory, a full disk, a row that is
    not ASCII) only loses the hint: it runs after the version is committed. Written through the fd of the store's
    checked directory in the user's cache (made ``0700`` where missing), never by path."""
    try:
        body = body_of(rows).encode("ascii")
        rests_at = len(body) - sum(len(rest) + 1 for _, _, rest in rows.values()) - 1 if rows else 0
        fields = {"schema": SCHEMA, "store": site.store, "reader": reader_digest(),
                  "started_ns": started_ns, "version": None if version is None else list(version),
                  "rests_at": rests_at, "rests_sha256": hashlib.sha256(body[rests_at:]).hexdigest()}
        head = json.dumps({**fields, "sha256": checksum(fields, body[:rests_at])}, sort_keys=True).encode()
        with user_cache.opened(*site.parts) as dir_fd:
            if dir_fd is not None:
                _replace(dir_fd, head + b"\n" + body)
    except (OSError, ValueError):  # ValueError: an UnsafeCacheError too (made unsafe since the load checked it)
        pass


def _replace(dir_fd: int, data: bytes) -> None:
    temp = f"stat-cache-{os.getpid()}-{secrets.token_hex(8)}"
    try:
        # 0600: it lists the source tree's paths, and only this user reads it.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
        with open(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, CACHE_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise

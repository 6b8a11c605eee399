"""Every bound a manifest is read within, in one place: a writer of a shared store chooses its bytes,
so nothing in them may cost the reader more than these allow.

=========================  ==============================  =============================================
bound                      value                           over it
=========================  ==============================  =============================================
manifest size              128 MiB, or                     :class:`ManifestLimitError` before it is read
                           ``ARTIFACTKIT_MAX_MANIFEST_      (:func:`manifest_size_limit`; the stores'
                           BYTES``                         readers enforce it)
nesting depth              the interpreter's recursion     :class:`ManifestLimitError` (the format nests 5
                           limit, 1000 by default          levels; see :func:`decode_manifest`)
lists and objects          one list per 8 bytes and one    :class:`ManifestLimitError` before it is
                           object per 16 (outside          decoded (:func:`check_containers`): what a
                           strings; 64 KiB are free)       reader's memory is bounded by
data runs of one file      2**20 (about 16 MiB of JSON)    :class:`ManifestLimitError`; publish refuses
                                                           such a file too
file size                  1 TiB, or                       :class:`ManifestLimitError` naming the entry,
                           ``ARTIFACTKIT_MAX_FILE_BYTES``  before a byte is hashed or written; publish
                           (at most 2**63 - 1,             refuses such a source file (:func:`file_size_limit`);
                           MAX_LFS_FILESIZE)               past 2**63 - 1 :class:`IntegrityError`
xattr name / value / list  255 / 65,536 / 65,536 bytes     :class:`IntegrityError` (``linux/limits.h``:
                                                           the kernel stores no more)
symlink target             4,095 bytes (PATH_MAX - 1)      :class:`IntegrityError` (``symlink(2)``)
entry path (tree depth)    4,095 bytes (PATH_MAX - 1):     :class:`TreeTooDeepError` before anything is
                           2,048 levels of one-byte names  written (publish refuses a deeper source so)
device number (major,      major < 2**12, minor < 2**20    :class:`IntegrityError` (``linux/kdev_t.h``: what
minor)                                                     ``mknod(2)`` can store in an inode)
integers                   4,300 digits (Python's          :class:`IntegrityError`
                           ``int_max_str_digits``)
=========================  ==============================  =============================================

Kernel limits are :class:`IntegrityError` (no real tree could have written it: the manifest is forged or
broken); our own policy bounds are :class:`ManifestLimitError`, whose ``setting`` says how to change one
that can be changed. Refusals quote hostile values through :func:`show`, so a 100 MB string is never a
100 MB message. The work is linear in the size otherwise: 200,000 hard-link groups (78 MiB) parse in
3.8 s, 9.5 us an entry, as 50,000 do.

Memory below the size limit: a manifest is decoded whole, and what that costs is in its lists and objects
(about 100 and 200 bytes each in Python), so each must be paid for by :data:`LIST_BYTES` and
:data:`OBJECT_BYTES` of the manifest. Within every bound here a manifest costs ``verify`` or ``download``
at most :data:`MAX_DECODED_FACTOR` (24) times its size, on either engine: peak RSS over the same command's
without it, ``python3 diagnostics/manifest_memory.py --mib 16`` (``diagnostics/results/manifest-memory.json``;
at 32 MiB the same factors). The worst, 23.1x, is lists of one short string at that density (``["abc"]``
and a space, repeated) on the reference engine, which decodes what nobody reads (the core skips it: 1x);
short strings alone cost 16.5x, distinct short keys 14.6x (18.4x with short values), usual file entries
4.7x (3.9x in the core), the smallest valid entries (one-character directories) 14-16x in a download.
Before the count (the same script on 88b0400), ``[[[...]]]`` 900 deep under a key nobody reads cost both
engines 50 times its size and ``[{},{},...]`` 26 (``tests/store/faults/test_hostile_memory.py``). At the
default 128 MiB a manifest therefore costs at most 3 GiB, a valid one of ~500,000 usual entries about
600 MiB (at 512 MiB it would have been 12 GiB). Since format 3 the limit holds each tree object (a directory of
~500,000 entries), and :data:`MAX_TREE_BYTES` a version's objects in all: raise ``ARTIFACTKIT_MAX_TREE_BYTES`` for
trees of more than ~3,000,000 entries on machines that can afford it.

Why a file has a limit below the kernel's: the digest covers every byte, holes too, and a sparse blob costs
its writer no space. An entry claiming 2**62 bytes over a planted blob of 2**62 bytes of hole made a download
and ``verify`` hash zeros for about a century (here 2 GiB of hole hashed in 1.7 s on the native engine, 2.3 s
on the reference). 1 TiB is about 14 minutes of that, the most one entry may cost; a real tree with a larger
file sets ``ARTIFACTKIT_MAX_FILE_BYTES`` where it is published and downloaded.

Repeated keys in one object: the last one counts, as in every Python JSON reader and ``jq``; it is the
one validated, so a reader who keeps the first sees another value but never one that escaped a check.
Refusing them would take a Python call per object (a tenth of a download's parse).
"""

from __future__ import annotations

import json
import operator
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Final, Protocol, runtime_checkable

from artifactkit.errors import IntegrityError, ManifestLimitError
from artifactkit.metadata.model import FileMeta

#: The default of :func:`manifest_size_limit`: about 500,000 usual file entries (~250 bytes each).
#: Read whole, a manifest costs a few times its size in memory (4.7x for usual entries, at most 24x).
MAX_MANIFEST_BYTES: Final = 128 << 20
MANIFEST_BYTES_SETTING: Final = "ARTIFACTKIT_MAX_MANIFEST_BYTES"
#: The most bytes of tree objects one version's walk reads (format 3; each object is held to the manifest limit):
#: a 1,000,000-file tree has about 300 MB of them. What a hostile store's version can cost a reader.
MAX_TREE_BYTES: Final = 1 << 30
TREE_BYTES_SETTING: Final = "ARTIFACTKIT_MAX_TREE_BYTES"
#: Data runs one file entry may list: a file with a hole every other 4 KiB block over 8 GiB. Each run is
#: a tuple in memory and a copy call in a download; without a bound one manifest line could ask for 50
#: million of them.
MAX_EXTENTS: Final = 1 << 20
#: The default of :func:`file_size_limit`: the largest file one entry may claim (see the module's text).
MAX_FILE_BYTES: Final = 1 << 40
FILE_BYTES_SETTING: Final = "ARTIFACTKIT_MAX_FILE_BYTES"
#: One past the largest size a Linux file can have (MAX_LFS_FILESIZE, the off_t maximum: tmpfs, xfs and
#: btrfs allow it). The inline parse in ``parse.py`` spells it ``2**63`` (a constant, not a lookup).
SIZE_LIMIT: Final = 2**63
# linux/limits.h: no filesystem stores a longer xattr name or value, or a longer list of names.
XATTR_NAME_MAX: Final = 255
XATTR_SIZE_MAX: Final = 65536
XATTR_LIST_MAX: Final = 65536
#: symlink(2) refuses a target of PATH_MAX (4096) bytes or more with ENAMETOOLONG.
TARGET_MAX: Final = 4095
#: The longest path of an entry: PATH_MAX (``linux/limits.h``) less its NUL, the longest a system call takes.
#: Publish records none longer (its scan refuses a source nested deeper than PATH_MAX: ``TreeTooDeepError``),
#: so every published version downloads; a forged deeper tree (1,200 levels of 8-byte names) failed its
#: download midway with a bare ENAMETOOLONG.
MAX_PATH_BYTES: Final = 4095
#: The deepest tree a manifest can describe: one-byte names and their slashes within :data:`MAX_PATH_BYTES`
#: (deeper than the interpreter's 1,000 frames, so nothing that walks a tree may recurse).
MAX_TREE_DEPTH: Final = (MAX_PATH_BYTES + 1) // 2
#: Bytes of a manifest that pay for each list in it, and for each object (:func:`check_containers`). Decoded,
#: a list costs about 100 bytes and an object about 200: ``[[[...]]]`` under a key nobody reads was 48 times
#: its size (6.2 GiB for 128 MiB). A publish writes at most one list per 11 bytes (a data run, ``[0, 4096], ``;
#: each later one is 14 or more) and an object per 70 (the smallest entry).
LIST_BYTES: Final = 8
OBJECT_BYTES: Final = 16
#: What a manifest's lists and objects may cost when it is smaller than this: a small one never comes near.
FREE_CONTAINER_BYTES: Final = 64 << 10
#: The most a manifest within every bound here costs a reader, in times its size (peak RSS of ``verify`` and
#: ``download``, both engines, measured by ``diagnostics/manifest_memory.py``).
MAX_DECODED_FACTOR: Final = 24
# linux/kdev_t.h (new_encode_dev): an inode holds a 12-bit major and a 20-bit minor; mknod(2) keeps no more.
RDEV_MAJOR_LIMIT: Final = 1 << 12
RDEV_MINOR_LIMIT: Final = 1 << 20

#: The longest quotation of a hostile value in a message.
_SHOWN: Final = 80


def manifest_size_limit() -> int:
    """The most bytes a manifest may have before it is read at all: :data:`MAX_MANIFEST_BYTES`, unless
    ``ARTIFACTKIT_MAX_MANIFEST_BYTES`` is set (an empty value counts as unset).

    The setting is a positive whole number of bytes in ASCII digits (surrounding whitespace allowed); any
    other value (``0``, ``-1``, ``512M``, ``1e6``, ``1_000``) is a :class:`ManifestLimitError` naming it,
    never silently the default: a limit someone meant to set must not quietly be another.
    """
    return _bytes_setting(MANIFEST_BYTES_SETTING, MAX_MANIFEST_BYTES, "a manifest size limit")


def tree_size_limit() -> int:
    """The most bytes of tree objects a walk of one version reads: :data:`MAX_TREE_BYTES`, unless
    ``ARTIFACTKIT_MAX_TREE_BYTES`` is set (read as :func:`manifest_size_limit` reads its setting)."""
    return _bytes_setting(TREE_BYTES_SETTING, MAX_TREE_BYTES, "a tree size limit")


def file_size_limit() -> int:
    """The largest size a file entry may claim (and a published file have): :data:`MAX_FILE_BYTES`, unless
    ``ARTIFACTKIT_MAX_FILE_BYTES`` is set, read as :func:`manifest_size_limit` reads its setting."""
    return _bytes_setting(FILE_BYTES_SETTING, MAX_FILE_BYTES, "a file size limit")


def _bytes_setting(setting: str, default: int, what: str) -> int:
    def refused(text: str) -> ManifestLimitError:
        return ManifestLimitError(
            f"{setting}={show(text)} is not {what}: give a positive whole number of bytes (the default is "
            f"{default})", limit=None, actual=text, setting=setting)
    return positive_setting(setting, default, refused)


def positive_setting(setting: str, default: int, refused: Callable[[str], Exception]) -> int:
    """The environment's ``setting`` as a positive whole number in ASCII digits (surrounding whitespace allowed),
    ``default`` where it is unset or empty; any other value raises ``refused(value)``, never silently the default:
    a limit someone meant to set must not quietly be another."""
    text = os.environ.get(setting, "")
    if not text:
        return default
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and int(digits) > 0):
        raise refused(text)
    return int(digits)


def _refuse_constant(name: str) -> float:
    # json reads NaN, Infinity and -Infinity, which RFC 8259 JSON does not have and no field may hold.
    raise ValueError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant)


def decode_manifest(data: bytes, *, where: str) -> object:
    """The JSON value of a manifest's bytes, or a named error: never a RecursionError or a bare ValueError.

    Its lists and objects are counted first (:func:`check_containers`): what the decoder makes of them is
    what a forged manifest could cost. Nesting is bounded by the C decoder itself: it counts each level
    against the interpreter's recursion limit (``sys.getrecursionlimit()``, 1000 by default, shared with the
    caller's own frames) and gives up with ``RecursionError`` there, so a deep manifest costs at most that
    many C frames and no Python recursion. The format nests 5 levels (document, entry list, entry, xattr
    list, xattr pair); a value nested less deeply than the limit under a key the format does not know is
    dropped with the parsed document, and nothing walks it (messages quote values through :func:`show`).
    """
    check_containers(data, where=where)
    try:
        text = data.decode("utf-8")
    except ValueError as err:
        raise IntegrityError(f"{where}: manifest is not valid JSON ({clip(str(err))})", path=where) from err
    return decode_text(text, where=where)


def decode_text(text: str, *, where: str) -> object:
    """The JSON value of ``text``, or a named error (:func:`decode_manifest`'s, whose caller counted the
    containers of the bytes ``text`` is part of)."""
    try:
        return _DECODER.decode(text)
    except RecursionError as err:
        limit = sys.getrecursionlimit()
        raise ManifestLimitError(
            f"{where}: manifest is nested deeper than the JSON decoder goes (about {limit} levels, the recursion "
            "limit; the format nests 5)", path=where, limit=limit, actual=None, setting=None) from err
    except ValueError as err:  # UnicodeDecodeError, JSONDecodeError, NaN, an int past 4,300 digits
        raise IntegrityError(f"{where}: manifest is not valid JSON ({clip(str(err))})", path=where) from err


def check_containers(data: bytes, *, where: str) -> None:
    """:class:`ManifestLimitError` if ``data`` holds more lists and objects than its size pays for: each list
    :data:`LIST_BYTES`, each object :data:`OBJECT_BYTES` of its bytes (or of :data:`FREE_CONTAINER_BYTES`,
    for a small one), counting only those outside JSON strings.

    Two counts of bytes decide for nearly every manifest (those inside strings counted too); only a manifest
    they refuse is counted exactly (the native core declines it to this count: ``native/src/manifest/parse``).
    """
    budget = max(len(data), FREE_CONTAINER_BYTES)
    if LIST_BYTES * data.count(b"[") + OBJECT_BYTES * data.count(b"{") <= budget:
        return
    lists, objects = _outside_strings(data)
    if LIST_BYTES * lists + OBJECT_BYTES * objects > budget:
        raise ManifestLimitError(
            f"{where}: manifest has more lists and objects than its {len(data)} bytes pay for (lists: {lists}, "
            f"objects: {objects}; one list per {LIST_BYTES} bytes and one object per {OBJECT_BYTES} at most): nesting "
            f"or lists denser than any tree's manifest, which decoding could make over {MAX_DECODED_FACTOR} times "
            "its size",
            path=where, limit=budget, actual=LIST_BYTES * lists + OBJECT_BYTES * objects, setting=None)


#: How much of a manifest :func:`_outside_strings` splits at once: its pieces cost about 50 bytes each.
_CHUNK: Final = 1 << 16


def _outside_strings(data: bytes) -> tuple[int, int]:
    """The ``[`` and ``{`` of ``data`` outside JSON strings (exactly, for valid JSON), at C speed in bounded memory.

    Escaped backslashes go first, then escaped quotes (left to right, as a reader pairs them); after that
    every quote opens or closes a string, so the bytes outside are those after an even number of quotes.
    """
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    lists = objects = 0
    inside = False
    for start in range(0, len(data), _CHUNK):
        pieces = data[start:start + _CHUNK].split(b'"')
        outside = b"".join(pieces[inside::2])
        lists, objects = lists + outside.count(b"["), objects + outside.count(b"{")
        inside ^= (len(pieces) - 1) % 2 == 1
    return lists, objects


def show(value: object) -> str:
    """A short quotation of any parsed JSON value for a message: never longer than about 100 characters,
    never recursing into containers (a deep list must not fail while being reported)."""
    if value is None or type(value) is bool or type(value) is float:
        return repr(value)
    if type(value) is int:
        return repr(value) if -(2**128) < value < 2**128 else f"an integer of {len(str(abs(value)))} digits"
    if type(value) is str:
        return repr(value) if len(value) <= _SHOWN else f"{value[:_SHOWN]!r}... ({len(value)} characters)"
    if type(value) is list and len(value) <= 4 and all(_scalar(item) for item in value):
        text = repr(value)
        if len(text) <= 2 * _SHOWN:
            return text
    if isinstance(value, list | dict):
        return f"a {'list' if isinstance(value, list) else 'object'} of {len(value)} items"
    return f"a {type(value).__name__}"


def _scalar(value: object) -> bool:
    return value is None or type(value) in (bool, int, float) or (type(value) is str and len(value) <= _SHOWN)


def clip(text: str) -> str:
    """``text`` cut to a length a person reads (a message built elsewhere that quoted a hostile value)."""
    return text if len(text) <= 4 * _SHOWN else f"{text[:4 * _SHOWN]}... ({len(text)} characters)"


# A JSON escape of a UTF-16 surrogate (\ud800-\udfff): the only way a manifest's text can hold one.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def may_hold_surrogates(data: bytes) -> bool:
    """Whether ``data`` escapes a surrogate anywhere: the cheap test (one ``memchr``) before the exact one.

    The writer escapes every non-ASCII character, so a name from a non-UTF-8 filesystem is a
    ``\\udcXX`` escape (surrogateescape) that must encode back; a lone ``\\ud800`` never can.
    """
    return b"\\" in data and _SURROGATE_ESCAPE.search(data) is not None


def check_file_sizes(entries: Sequence[FileMeta], limit: int, *, where: str) -> None:
    """Every file within ``limit`` (:func:`~artifactkit.manifest.limits.file_size_limit`), or
    :class:`ManifestLimitError` naming the first past it: the claim is refused before a byte is hashed or
    written, whatever blob a writer of the store planted to match it. Publish refuses such a source file
    (``scan.py``), so every version it makes reads back here."""
    if max(map(_SIZE, entries), default=0) <= limit:  # one C loop: 9 ms for 100,000 entries, under 1 % of their parse
        return
    entry = next(entry for entry in entries if entry.size > limit)
    raise file_too_large(f"{where}: entry {show(entry.path)} claims", entry.size, limit, where=where)


def file_too_large(what: str, size: int, limit: int, *, where: str) -> ManifestLimitError:
    """``what`` (an entry that claims, a source file that has) ``size`` bytes, past the single-file ``limit``."""
    return ManifestLimitError(
        f"{what} {size} bytes, more than the {limit} a file may have ({FILE_BYTES_SETTING}: a download hashes every "
        "byte, holes too); set it higher where the tree is published and downloaded",
        path=where, limit=limit, actual=size, setting=FILE_BYTES_SETTING)


_SIZE: Final = operator.attrgetter("size")


@runtime_checkable
class FileBytes(Protocol):
    """Captured entries that know their files' bytes without making every entry (the native core's capture)."""

    def file_bytes(self) -> int:
        """The bytes of every regular file, a hard link's once."""


def check_source_sizes(entries: Sequence[FileMeta], limit: int, *, root: str) -> None:
    """A source tree's captured ``entries`` with no file past ``limit``, else :class:`ManifestLimitError` naming
    the first in scan order (the reference's scan finds it as it goes): a publish of it would be a version no
    download reads. Nothing has been read yet."""
    if isinstance(entries, FileBytes) and entries.file_bytes() <= limit:
        return  # the usual tree: no entry made to learn that none is larger
    oversized = next((entry for entry in entries if entry.size > limit), None)
    if oversized is not None:
        raise file_too_large(f"source {root!r}: {oversized.path!r} has", oversized.size, limit, where=root)

"""Find out by experiment what a directory's filesystem does to atime; never trust mount options.

Mount options only say what was asked for: an inode flag on an ancestor, ``lazytime``, a FUSE
layer or a kernel change can all make them lie. So every answer here comes from scratch files in
a private scratch directory inside the probed directory, which is removed afterwards. On a network
or FUSE filesystem every time is read back past the client's attribute caches where that can be
done (:mod:`artifactkit.isolation.client_cache`), and what could not be is reported unverified.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any, Final, Literal

import attrs

from artifactkit._fsutil import remove_tree
from artifactkit._mounts import may_cache_attributes, mount_info
from artifactkit.isolation.client_cache import UNVERIFIED, ClientCache, look_past_caches
from artifactkit.isolation.reading import read_file
from artifactkit.isolation.time_range import NS_PER_S, TimeRange, batch_tries, measure_range, range_from_batch
from artifactkit.metadata.drift import GRANULARITIES_NS
from artifactkit.metadata.flags import FlagResult, get_flags, set_noatime_flag

SCHEMA: Final = "artifactkit.probe/1"

#: A historical value with every ns digit used (2001-09-09): older than any ctime, so relatime moves it.
HISTORICAL_NS: Final = 1_000_000_000_123_456_789
#: Whole-second values either side of the 32-bit range, to see what the filesystem can hold.
PRE_1970_NS: Final = -315_619_200 * NS_PER_S      # 1960-01-01
POST_2038_NS: Final = 4_102_444_800 * NS_PER_S    # 2100-01-01

AtimePolicy = Literal["strictatime", "relatime", "noatime", "unverified (client-cached attributes)"]
#: The findings a client cache could have faked, in the order ``unverified`` lists them.
CACHE_FAKEABLE: Final = ("atime_policy", "granularity_ns", "pre_1970_ok", "post_2038_ok")
FlagSupport = Literal["supported", "unsupported", "forbidden"]


@attrs.frozen
class AtimeProbe:
    """What a filesystem does to atime, found by experiment in one directory."""

    directory: str
    device: int
    fs_type: str
    mount_options: tuple[str, ...]
    reads_move_historical_atime: bool
    reads_move_future_atime: bool
    noatime_flag: FlagSupport
    flag_inherited: bool | None
    flag_effective: bool | None
    granularity_ns: int
    pre_1970_ok: bool
    post_2038_ok: bool
    #: Whether a client cache of attributes was seen: a later or fresher look disagreed with the first.
    client_cache: ClientCache = "not applicable"
    #: Findings a client cache could have faked and nothing could look past (names from ``CACHE_FAKEABLE``).
    unverified: tuple[str, ...] = ()
    #: The whole seconds this filesystem holds (:mod:`~artifactkit.isolation.time_range`); ``None`` where a client
    #: cache could not be looked past (no conformance or noatime tree runs there).
    time_range: TimeRange | None = None

    @property
    def atime_policy(self) -> AtimePolicy:
        """The policy the experiment showed (a future atime moves only under strictatime).

        A move seen is proof through any cache (a cache hides changes, it does not invent the server's);
        "reads leave atime alone" seen only through a cache is not, and says so.
        """
        if self.reads_move_future_atime:
            return "strictatime"
        if self.reads_move_historical_atime:
            return "relatime"
        return UNVERIFIED if "atime_policy" in self.unverified else "noatime"

    @property
    def attributes_trusted(self) -> bool:
        """Whether what a test reads back here is the filesystem's, not a client cache's."""
        return self.client_cache in ("not applicable", "not seen")

    @property
    def reads_move_atime(self) -> bool:
        """Whether a read would move the historical atime a restore writes (what isolation must stop)."""
        return self.reads_move_historical_atime or self.reads_move_future_atime

    def summary(self) -> str:
        """One line for logs and the pytest header."""
        flag: str = self.noatime_flag
        if flag == "supported":
            flag += ", inherited" if self.flag_inherited else ", NOT inherited"
        cache = "" if self.client_cache == "not applicable" else f" client_cache={self.client_cache}"
        span = self.time_range or UNVERIFIED
        return f"fs={self.fs_type} atime={self.atime_policy} FS_NOATIME_FL={flag}{cache} time_range {span}"

    def to_json(self) -> dict[str, Any]:
        """The ``artifactkit.probe/1`` document (no absolute paths: evidence is sanitized)."""
        return {
            "schema": SCHEMA,
            "fs_type": self.fs_type,
            "mount_options": [o.split("=", 1)[0] + "=<path>" if "/" in o else o for o in self.mount_options],
            "reads_move_historical_atime": self.reads_move_historical_atime,
            "reads_move_future_atime": self.reads_move_future_atime,
            "atime_policy": self.atime_policy,
            "noatime_flag": self.noatime_flag,
            "flag_inherited": self.flag_inherited,
            "flag_effective": self.flag_effective,
            "granularity_ns": self.granularity_ns,
            "pre_1970_ok": self.pre_1970_ok,
            "post_2038_ok": self.post_2038_ok,
            "client_cache": self.client_cache,
            "unverified": list(self.unverified),
            "time_range": None if self.time_range is None else self.time_range.to_json(),
        }


def read_moves_atime(path: str, atime_ns: int, mtime_ns: int = HISTORICAL_NS) -> bool:
    """Set ``atime_ns``, read the file once, and report whether atime moved from what was stored.

    The comparison is with the value read back before the read, not the one asked for: a coarse
    filesystem truncates on ``utime`` and that is not a read moving anything.
    """
    os.utime(path, ns=(atime_ns, mtime_ns), follow_symlinks=False)
    stored = os.lstat(path).st_atime_ns
    read_file(path)
    return os.lstat(path).st_atime_ns != stored


def write_file(path: str, data: bytes = b"artifactkit probe\n") -> None:
    """Create a file with content (a read of an empty file still moves atime, but be plain)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def stores_exactly(path: str, value_ns: int) -> bool:
    """Whether the filesystem keeps ``value_ns`` as mtime unchanged (no truncation, no clamp)."""
    try:
        os.utime(path, ns=(value_ns, value_ns), follow_symlinks=False)
    except (OverflowError, OSError):
        return False
    return os.lstat(path).st_mtime_ns == value_ns


def granularity_of(path: str) -> int:
    """The coarsest candidate unit that explains how ``HISTORICAL_NS`` was stored."""
    os.utime(path, ns=(HISTORICAL_NS, HISTORICAL_NS), follow_symlinks=False)
    return granularity_from(os.lstat(path).st_mtime_ns)


def granularity_from(stored: int) -> int:
    """The coarsest candidate unit that explains ``HISTORICAL_NS`` stored as ``stored``."""
    for unit in GRANULARITIES_NS:
        if stored == (HISTORICAL_NS // unit) * unit:
            return unit
    return NS_PER_S  # a filesystem that neither keeps nor truncates: report it as whole seconds


def _flag_experiment(scratch: str, moves: bool) -> tuple[FlagSupport, bool | None, bool | None]:
    flagged = os.path.join(scratch, "flagged")
    os.mkdir(flagged, 0o700)
    result: FlagResult = set_noatime_flag(flagged, private_root=flagged)
    if result.status != "ok":
        return result.status, None, None
    if not result.noatime:
        return "unsupported", None, None  # accepted but not kept: the same as not having it
    nested = os.path.join(flagged, "nested")
    os.mkdir(nested, 0o700)
    files = [os.path.join(flagged, "file"), os.path.join(nested, "file")]
    for path in files:
        write_file(path)
    inherited = all(get_flags(path).noatime for path in (nested, *files))
    if not moves:
        return "supported", inherited, None  # no positive control can be made here
    control = os.path.join(scratch, "control")
    write_file(control)
    set_noatime_flag(files[0], private_root=flagged)  # btrfs inherits nothing: test the flag, not inheritance
    flagged_moved = read_moves_atime(files[0], HISTORICAL_NS)
    control_moved = read_moves_atime(control, HISTORICAL_NS)
    effective = (not flagged_moved) if control_moved else None
    return "supported", inherited, effective


def probe_atime(directory: str | os.PathLike[str]) -> AtimeProbe:
    """Probe ``directory``'s filesystem by experiment on scratch files inside it.

    Reads of a historical atime move it under relatime and strictatime (``utime`` leaves ctime
    at now); reads of a future atime move it only under strictatime. The flag is set only on a
    scratch directory; everything is created in one private scratch directory and removed.
    On a network or FUSE filesystem the same experiments run past the client's caches
    (:func:`~artifactkit.isolation.client_cache.look_past_caches`: at most 3 s longer).
    """
    where = os.path.realpath(directory)
    info = mount_info(where)
    scratch = tempfile.mkdtemp(prefix=".artifactkit-probe-", dir=where)
    cache: ClientCache = "not applicable"
    try:
        # A year ahead: newer than mtime and ctime, so relatime leaves it; strictatime does not.
        future_ns = time.time_ns() + 365 * 86_400 * NS_PER_S
        if may_cache_attributes(info.fs_type):
            tries = batch_tries()
            found = look_past_caches(scratch, HISTORICAL_NS, future_ns,
                                     (PRE_1970_NS, POST_2038_NS, *(second * NS_PER_S for second in tries)), write_file)
            historical, future, cache = found.historical_moved, found.future_moved, found.verdict
            granularity = granularity_from(found.historical_mtime_ns)
            span = None if cache == "cannot tell" else range_from_batch(
                dict(zip(tries, found.extremes_kept[2:], strict=True)), granularity)
            pre_1970, post_2038 = (kept == wanted for kept, wanted in zip(found.extremes_kept[:2],
                                                                            (PRE_1970_NS, POST_2038_NS), strict=True))
        else:
            sample = os.path.join(scratch, "sample")
            write_file(sample)
            historical = read_moves_atime(sample, HISTORICAL_NS)
            future = read_moves_atime(sample, future_ns)
            granularity = granularity_of(sample)
            pre_1970 = stores_exactly(sample, PRE_1970_NS)
            post_2038 = stores_exactly(sample, POST_2038_NS)
            span = measure_range(sample, granularity)
        support, inherited, effective = _flag_experiment(scratch, historical or future)
        device = os.lstat(where).st_dev
    finally:
        with contextlib.suppress(OSError):
            remove_tree(scratch)
    return AtimeProbe(
        directory=where, device=device, fs_type=info.fs_type, mount_options=info.options,
        reads_move_historical_atime=historical, reads_move_future_atime=future,
        noatime_flag=support, flag_inherited=inherited, flag_effective=effective,
        granularity_ns=granularity, pre_1970_ok=pre_1970, post_2038_ok=post_2038, client_cache=cache,
        unverified=_unverified(historical or future, pre_1970, post_2038) if cache == "cannot tell" else (),
        time_range=span,
    )


def _unverified(moved: bool, pre_1970: bool, post_2038: bool) -> tuple[str, ...]:
    """What a cache that could not be looked past may have faked: a value kept, a read that moved nothing.

    A move or a loss seen is proof through any cache; the granularity may hide a truncation either way.
    """
    faked = {"atime_policy": not moved, "granularity_ns": True, "pre_1970_ok": pre_1970, "post_2038_ok": post_2038}
    return tuple(name for name in CACHE_FAKEABLE if faked[name])


def isolation_choice(probe: AtimeProbe) -> str:
    """What :func:`~artifactkit.isolation.tree.private_noatime_tree` will do on this filesystem, in words."""
    if not probe.attributes_trusted:
        return f"NONE: attributes may come from a client cache ({probe.client_cache}), noatime_tree will error"
    if not probe.reads_move_atime:
        return "noatime-mount (no flag needed)"
    if probe.noatime_flag != "supported":
        return f"NONE: flag {probe.noatime_flag}, noatime_tree will error"
    if not probe.flag_inherited:
        return "NONE: flag not inherited, noatime_tree will error"
    if probe.flag_effective is False:
        return "NONE: flag not effective, noatime_tree will error"
    return "flag (FS_NOATIME_FL on each private tree)"

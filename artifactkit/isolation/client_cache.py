"""The probe's experiments where a client may answer ``stat`` from a cache: look later, and under a new name.

Networked and FUSE filesystems answer ``stat`` from caches in the client: the kernel's attribute
timeout (1 s by default for FUSE), and often one of the daemon's own keyed by path (sshfs keeps
attributes for 20 s whatever ``attr_timeout`` says; s3fs for 900 s). A read that moved atime on the
server, or a ``utime`` the server did not keep (``weed mount`` keeps no atime at all), then looks
fine for as long as the cache lives. Mount options cannot say which caches exist, so this finds
out by experiment:

- every value is set first, on a scratch file of its own, and looked at only after ``WAIT_S``,
  past the kernel's default attribute timeout; the reads are done then and looked at after another
  ``WAIT_S``: the probe takes at most ``2 * WAIT_S`` (3 s) longer here, plus a few round trips;
- each look is the name in use (``lstat``), then a *new* hard link made for that one look (a name
  no cache has seen: the daemon's fresh lookup), then removed. A link is used as a look only after
  a sacrificial file showed that making one leaves the inode's times alone (``weed mount``'s
  ``link`` sets mtime to now: there it would change what it looks at);
- any look disagreeing with an earlier one proves a client cache (``seen``); the freshest is used;
- where no harmless link can be made (s3fs, rclone mount have no ``link``), a cache longer than the
  wait cannot be told from the filesystem (``cannot tell``): the probe reports what rests on it as
  unverified.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import Final, Literal

import attrs

from artifactkit._mounts import PAST_ATTRIBUTE_CACHE_S
from artifactkit.isolation.reading import read_file

#: What the probe could prove about a client cache of attributes on the probed filesystem.
ClientCache = Literal["not applicable", "not seen", "seen", "cannot tell"]
UNVERIFIED: Final = "unverified (client-cached attributes)"
#: How long the probe waits before it looks (a module value: the tests' stand-ins have no timeout to wait out).
WAIT_S: Final = PAST_ATTRIBUTE_CACHE_S
_names = itertools.count()
Times = tuple[int, int]


def _plain(path: str) -> Times:
    st = os.lstat(path)
    return st.st_atime_ns, st.st_mtime_ns


def linked_times(path: str) -> Times | None:
    """``(atime_ns, mtime_ns)`` of ``path`` looked up under a new hard link, or None where no link can be made."""
    name = f"{path}.look-{os.getpid()}-{next(_names)}"
    try:
        os.link(path, name, follow_symlinks=False)
    except OSError:
        return None  # EOPNOTSUPP, EPERM, ENOSYS, EXDEV...: this filesystem offers no second name
    try:
        return _plain(name)
    finally:
        os.unlink(name)


class _Looks:
    """Looks at scratch files past what caches it can; remembers whether any look disagreed."""

    def __init__(self) -> None:
        self.seen = False
        self.links = False

    def calibrate(self, path: str) -> None:
        """Use links as looks only if one leaves the times of ``path`` (already waited on) alone."""
        before = _plain(path)
        linked = linked_times(path)
        self.links = linked is not None and linked == before == _plain(path)

    def look(self, path: str, earlier: Times | None = None) -> Times:
        """The freshest view of ``path``'s times; views disagreeing, or with ``earlier`` (nothing has happened to
        the file since that look), is a cache seen."""
        now = _plain(path)
        fresh = linked_times(path) if self.links else None
        best = fresh if fresh is not None else now
        self.seen = self.seen or best != now or (earlier is not None and now != earlier)
        return best


@attrs.frozen
class LookedPast:
    """What the probe's atime and timestamp experiments found, read back past the caches."""

    historical_moved: bool
    future_moved: bool
    historical_mtime_ns: int            #: how ``historical_ns`` was stored as mtime
    extremes_kept: tuple[int | None, ...]  #: each extreme as stored (None: utime refused it)
    verdict: ClientCache


def look_past_caches(scratch: str, historical_ns: int, future_ns: int, extremes: tuple[int, ...],
                     write: Callable[[str], None]) -> LookedPast:
    """Run the probe's experiments in ``scratch`` with every read-back past the caches (see the module doc)."""
    looks = _Looks()
    # (atime, mtime) per scratch file; the extremes are set as both, as stores_exactly does.
    settings: dict[str, Times] = {"calibration": (historical_ns, historical_ns),
                                  "historical": (historical_ns, historical_ns), "future": (future_ns, historical_ns),
                                  **{f"extreme-{i}": (value, value) for i, value in enumerate(extremes)}}
    paths = {name: os.path.join(scratch, name) for name in settings}
    first: dict[str, Times | None] = {}
    for name, path in paths.items():
        write(path)
        try:
            os.utime(path, ns=settings[name], follow_symlinks=False)
        except (OverflowError, OSError):
            first[name] = None  # refused: this extreme cannot be held
            continue
        first[name] = _plain(path)
    time.sleep(WAIT_S)
    looks.calibrate(paths["calibration"])
    stored = {name: looks.look(paths[name], seen) for name, seen in first.items() if seen is not None}
    for name in ("historical", "future"):
        read_file(paths[name])
    time.sleep(WAIT_S)
    after = {name: looks.look(paths[name]) for name in ("historical", "future")}  # a read may have moved atime
    verdict: ClientCache = "seen" if looks.seen else ("not seen" if looks.links else "cannot tell")
    return LookedPast(
        historical_moved=after["historical"][0] != stored["historical"][0],
        future_moved=after["future"][0] != stored["future"][0],
        historical_mtime_ns=stored["historical"][1],
        extremes_kept=tuple(stored[f"extreme-{i}"][1] if f"extreme-{i}" in stored else None
                            for i in range(len(extremes))),
        verdict=verdict,
    )

"""The whole seconds a filesystem's times can hold, found by experiment: set a value, read it back.

Mount options and ``statfs`` say nothing of it, and the kernel does not refuse a value past its range: since
Linux 5.4 ``utime`` clamps it onto the edge (``timestamp_truncate``: the edge's whole second, its ns dropped)
and answers 0. So the probe walks outward from a time every filesystem holds, trying the value just past each
known edge (:mod:`artifactkit.metadata.range_edges`: 2038, 2106, 2446, 2486, 2262...) and then the store's
limit (signed 64-bit seconds). The first value not kept ends the walk; the edge is then whichever of the value
the filesystem clamped it to, or the known edge just inside it, is kept itself. About a dozen ``utime`` and
``lstat`` calls on one scratch file: tmpfs and btrfs walk to the end, ext4 stops at 2446, FAT's grid at 2107.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from artifactkit.manifest.fields import NS_LIMIT
from artifactkit.metadata.range_edges import CLAMP_CEILINGS_S, CLAMP_FLOORS_S, I64_NS_EDGES

NS_PER_S: Final = 1_000_000_000
#: The whole seconds the store holds (``NS_LIMIT``: the kernel's ``timespec64``), and so the widest a range is.
STORE_LOWEST_S: Final = -NS_LIMIT // NS_PER_S
STORE_HIGHEST_S: Final = NS_LIMIT // NS_PER_S - 1
#: Where the walk starts (2001-09-09): a time every filesystem in use holds, FAT's two-second grid included.
ANCHOR_S: Final = 1_000_000_000
#: The last whole seconds inside a signed 64-bit count of ns: a tool keeping ``i64`` ns stops there.
_I64_NS_S: Final = (-(-I64_NS_EDGES[0] // NS_PER_S), I64_NS_EDGES[1] // NS_PER_S)


def _tries(edges: Iterable[int], outward: int, limit: int) -> tuple[int, ...]:
    """The value just past each known edge beyond the anchor, nearest first, then the store's limit."""
    past = {edge + outward for edge in edges if (edge - ANCHOR_S) * outward > 0 and (limit - edge) * outward > 0}
    return (*sorted(past, key=lambda second: second * outward), limit)


#: The values tried above and below the anchor, in the order tried.
HIGH_TRIES_S: Final = _tries((*CLAMP_CEILINGS_S, _I64_NS_S[1]), 1, STORE_HIGHEST_S)
LOW_TRIES_S: Final = _tries((*CLAMP_FLOORS_S, _I64_NS_S[0]), -1, STORE_LOWEST_S)

def _day(second: int) -> str:
    """A whole second as its UTC day where a calendar date names it (years 1 to 9999), else as seconds."""
    import datetime  # noqa: PLC0415 - only a rendering needs it; the probe's import stays light

    try:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return (epoch + datetime.timedelta(seconds=second)).date().isoformat()
    except OverflowError:
        return f"{second} s"


#: Sets one whole second (as both times) and returns the mtime read back, ``None`` where ``utime`` refused it.
Store = Callable[[int], "int | None"]


@attrs.frozen
class TimeRange:
    """The lowest and highest whole seconds a filesystem holds exactly, on its grid of ``granularity_ns``."""

    lowest_s: int
    highest_s: int
    granularity_ns: int = 1

    def __str__(self) -> str:
        """As the docs' tables write it: ``64-bit seconds`` (all the store holds) or ``1901-12-13 .. 2446-05-10``
        (the JSON keeps the exact seconds)."""
        if (self.lowest_s, self.highest_s) == (STORE_LOWEST_S, STORE_HIGHEST_S):
            return "64-bit seconds"
        return f"{_day(self.lowest_s)} .. {_day(self.highest_s)}"

    def to_json(self) -> list[int]:
        return [self.lowest_s, self.highest_s]

    def __and__(self, other: TimeRange) -> TimeRange:
        """What both hold: a copy from one to the other can keep only these."""
        return TimeRange(max(self.lowest_s, other.lowest_s), min(self.highest_s, other.highest_s),
                         max(self.granularity_ns, other.granularity_ns))

    def value_ns(self, name: str) -> int:
        """A time at an end, by name: ``lowest`` and ``highest`` are the edges' whole seconds (the kernel drops
        the ns of a time in an edge's own second); ``inside lowest`` / ``inside highest`` the nearest times
        with a ns part the filesystem keeps (one grid step into the next second in, one step before the edge)."""
        step = self.granularity_ns if self.granularity_ns < NS_PER_S else 0
        values = {"lowest": self.lowest_s * NS_PER_S, "highest": self.highest_s * NS_PER_S,
                  "inside lowest": (self.lowest_s + 1) * NS_PER_S + step,
                  "inside highest": self.highest_s * NS_PER_S - (step or self.granularity_ns)}
        if name not in values:
            raise ValueError(f"no range end named {name!r}; known: {', '.join(values)}")
        return values[name]


#: What the store holds: the range a tree names its ends in when no filesystem has been measured.
STORE_RANGE: Final = TimeRange(STORE_LOWEST_S, STORE_HIGHEST_S)


def _end(tries: tuple[int, ...], store: Store, granularity_ns: int) -> int:
    """The furthest whole second kept, walking ``tries`` outward from the anchor."""
    best = ANCHOR_S
    for second in tries:
        stored = store(second)
        found = _kept(second, stored, granularity_ns)
        if found is not None:
            best = found
            continue
        # Not kept: the edge lies between. The kernel clamps onto it; else try the known edge just inside, and the
        # second inside that (SFTP's 0 means "now": sshfs holds 1 ... 2**32 - 1).
        outward = 1 if second > ANCHOR_S else -1
        clamped = [stored // NS_PER_S] if stored is not None and stored % NS_PER_S == 0 else []
        for candidate in (*clamped, second - outward, second - 2 * outward):
            if (candidate - best) * outward > 0 and (second - candidate) * outward > 0:
                inside = _kept(candidate, store(candidate), granularity_ns)
                if inside is not None:
                    return inside
        return best
    return best


def _kept(second: int, stored: int | None, granularity_ns: int) -> int | None:
    """The second as kept, when it came back as itself on the filesystem's grid (a two-second grid floors an odd
    second: the one it floors to is what the filesystem holds), else ``None``."""
    value = second * NS_PER_S
    return stored // NS_PER_S if stored is not None and stored == value - value % granularity_ns else None


def measure_range(path: str, granularity_ns: int) -> TimeRange:
    """Walk both ways on the scratch file ``path`` (its times are left at the anchor)."""
    def store(second: int) -> int | None:
        try:
            os.utime(path, ns=(second * NS_PER_S, second * NS_PER_S), follow_symlinks=False)
        except (OverflowError, OSError):
            return None
        return os.lstat(path).st_mtime_ns

    found = TimeRange(_end(LOW_TRIES_S, store, granularity_ns), _end(HIGH_TRIES_S, store, granularity_ns),
                      granularity_ns)
    store(ANCHOR_S)
    return found


def range_from_batch(kept: dict[int, int | None], granularity_ns: int) -> TimeRange:
    """The range from values tried all at once (a network filesystem's probe sets each on a file of its own and
    looks past the caches once): the walk over what each came back as, without a second try of a clamp."""
    def store(second: int) -> int | None:
        return kept.get(second)
    return TimeRange(_end(LOW_TRIES_S, store, granularity_ns), _end(HIGH_TRIES_S, store, granularity_ns),
                     granularity_ns)


def batch_tries() -> tuple[int, ...]:
    """Every second :func:`range_from_batch` may ask about: each try and the two seconds just inside it."""
    inside = {try_s - step * outward for tries, outward in ((HIGH_TRIES_S, 1), (LOW_TRIES_S, -1))
              for try_s in tries for step in (1, 2)}
    return tuple(sorted({*HIGH_TRIES_S, *LOW_TRIES_S, *inside}))

"""Who touched the work tree: accesses split into self, readers and unexplained, and strangers grouped.

fanotify names each outside process (pid, executable, parent chain, command line). A loop such as
``find BASE -type f -exec cat {} +`` makes a hundred of them in a run, all alike, so the summary
groups them by executable and the nearest ancestors (``sh → find → cat: 57 processes, 114 events``)
and leaves the per-process details to the JSON evidence. Command lines name the work tree and the
base as ``<work>`` and ``<base>``; the evidence sanitizer takes care of every other path.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Sequence
from typing import Final

import attrs

from artifactkit.trace.tracer import FanotifyReport, HoldStats, PidAccesses
from artifactkit.trace.watcher import AccessSplit, split_accesses

#: Ancestors that make up a group's key and label: enough to tell ``cron → sh → find → cat`` from
#: an interactive ``bash → sh → find → cat``, few enough that a row fits.
GROUP_ANCESTORS: Final = 3
ARROW: Final = " → "


@attrs.frozen
class AccessGroup:
    """Outside processes with the same executable and nearest ancestors, and what they did together."""

    chain: tuple[str, ...]  #: up to GROUP_ANCESTORS ancestors' executables, farthest first
    executable: str
    processes: int
    events: int

    @property
    def label(self) -> str:
        """``sh → find → cat``."""
        return ARROW.join([*self.chain, self.executable])


@attrs.frozen
class Accesses:
    """Accesses under the work tree by who explains them; ``attributed`` lists outside processes."""

    method: str  #: "fanotify" (per process, exact about who) or "inotify-accounting" (a lower bound)
    self_accesses: int
    reader_accesses: int
    unexplained: int
    attributed: tuple[PidAccesses, ...]  #: command lines already say <work>/<base> for our paths
    inotify_split: AccessSplit
    hold: HoldStats | None = None        #: what holding openers cost, when fanotify could hold

    @property
    def groups(self) -> tuple[AccessGroup, ...]:
        """:attr:`attributed` grouped, most events first."""
        return group_accesses(self.attributed)


def group_accesses(items: Sequence[PidAccesses], ancestors: int = GROUP_ANCESTORS) -> tuple[AccessGroup, ...]:
    """Group by (nearest ``ancestors`` of the chain, executable); sorted by events, then processes, then label."""
    processes: collections.Counter[tuple[tuple[str, ...], str]] = collections.Counter()
    events: collections.Counter[tuple[tuple[str, ...], str]] = collections.Counter()
    for item in items:
        key = (item.chain[-ancestors:] if ancestors else (), item.executable)
        processes[key] += 1
        events[key] += item.events
    groups = [AccessGroup(chain, exe, processes[(chain, exe)], events[(chain, exe)]) for chain, exe in processes]
    return tuple(sorted(groups, key=lambda g: (-g.events, -g.processes, g.label)))


def path_masker(places: Sequence[tuple[str, str]]) -> re.Pattern[str]:
    """One pattern for every ``(path, label)``, longest first, matching whole path components only."""
    ordered = sorted(places, key=lambda place: -len(place[0]))
    return re.compile("|".join(rf"(?:{re.escape(path)})(?![\w.@+~-])" for path, _ in ordered))


def mask_argv(argv: Sequence[str], places: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """``argv`` with each of ``places``' paths (``/srv/base/artifactkit-diagnose-x``) replaced by its label."""
    if not places:
        return tuple(argv)
    labels = dict(places)
    pattern = path_masker(places)
    return tuple(pattern.sub(lambda m: labels[m.group(0)], arg) for arg in argv)


def account(watch_opens: int, self_opens: int, *, reader_pids: Sequence[int], reader_opens: int,
            fan: FanotifyReport | None, places: Sequence[tuple[str, str]]) -> Accesses:
    """Reconcile inotify's count with ours; with fanotify, attribute every event to a process."""
    split = split_accesses(watch_opens, self_opens, reader_opens)
    if fan is None:
        return Accesses("inotify-accounting", split.self_opens, split.reader_opens, split.unexplained, (), split)
    own, readers = {os.getpid()}, set(reader_pids)
    foreign = tuple(attrs.evolve(item, argv=mask_argv(item.argv, places))
                    for item in fan.by_pid if item.pid not in own | readers)
    return Accesses("fanotify", fan.events_of(own), fan.events_of(readers),
                    sum(item.events for item in foreign), foreign, split, fan.hold)

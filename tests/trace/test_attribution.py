"""Strangers grouped by executable and parents, and our paths in their command lines masked."""

from __future__ import annotations

import os

from artifactkit.trace.attribution import ARROW, account, group_accesses, mask_argv
from artifactkit.trace.tracer import FanotifyReport, HoldStats, PidAccesses

HOLD = HoldStats("permission", 10, 3, 0, 400, 900, 5, 2000)


def _cat(pid: int, events: int, chain: tuple[str, ...] = ("bash", "sh", "find")) -> PidAccesses:
    return PidAccesses(pid, "cat", events, chain, ("cat", "/srv/base/artifactkit-diagnose-x/src/a"))


def test_processes_group_by_executable_and_nearest_ancestors_most_events_first() -> None:
    items = [_cat(10, 2), _cat(11, 3), _cat(12, 1, ("cron", "bash", "sh", "find")),
             PidAccesses(20, "find", 9, ("bash", "sh")), PidAccesses(30, "updatedb", 1, ())]
    groups = group_accesses(items)
    assert [(g.label, g.processes, g.events) for g in groups] == [
        (ARROW.join(["bash", "sh", "find"]), 1, 9),
        (ARROW.join(["bash", "sh", "find", "cat"]), 3, 6),  # cron's cat has the same three nearest
        ("updatedb", 1, 1),
    ]


def test_more_ancestors_tell_more_groups_apart() -> None:
    items = [_cat(10, 2), _cat(12, 1, ("cron", "bash", "sh", "find"))]
    assert len(group_accesses(items)) == 1
    assert len(group_accesses(items, ancestors=4)) == 2


def test_our_paths_in_a_command_line_become_labels_whole_components_only() -> None:
    places = [("/srv/base/artifactkit-diagnose-x", "<work>"), ("/srv/base", "<base>")]
    argv = ("sh", "-c", "find /srv/base -type f; cat /srv/base/artifactkit-diagnose-x/src/a /srv/base2/z")
    assert mask_argv(argv, places) == (
        "sh", "-c", "find <base> -type f; cat <work>/src/a /srv/base2/z")
    assert mask_argv(argv, []) == argv


def test_fanotify_accounting_leaves_out_this_process_and_the_readers() -> None:
    report = FanotifyReport((PidAccesses(os.getpid(), "python3", 7, named="self"),
                             PidAccesses(41, "python3", 50, named="reader"), _cat(99, 4)), 0, "permission", HOLD)
    acc = account(100, 7, reader_pids=[41], reader_opens=50, fan=report,
                  places=[("/srv/base/artifactkit-diagnose-x", "<work>")])
    assert (acc.method, acc.self_accesses, acc.reader_accesses, acc.unexplained) == ("fanotify", 7, 50, 4)
    assert [item.pid for item in acc.attributed] == [99]
    assert acc.attributed[0].argv == ("cat", "<work>/src/a")
    assert acc.hold == HOLD
    assert [(g.executable, g.processes) for g in acc.groups] == [("cat", 1)]


def test_without_fanotify_the_split_is_inotify_accounting() -> None:
    acc = account(100, 7, reader_pids=[41], reader_opens=50, fan=None, places=[])
    assert (acc.method, acc.unexplained, acc.attributed, acc.groups, acc.hold) == (
        "inotify-accounting", 43, (), (), None)

"""Durability order, checked from the outside: ``strace`` a real publish and check the persistence rules.

There is no device-mapper here, so power loss cannot be replayed at block level; instead the rules
that ALICE/CrashMonkey found applications break, and that git and restic follow, are checked on the
syscall trace of an unmodified publish in a child process:

1. every file that becomes visible (a blob or a manifest renamed into ``blobs/`` or ``manifests/``)
   was flushed -- ``fsync``/``fdatasync`` of it, or a ``syncfs`` -- after its last write and before
   the rename;
2. the directory that holds each new visible name is fsynced after that rename, before publish
   returns;
3. a directory publish creates on the way to a visible name is made durable in its parent too.

Deliberately broken publishes (one step reordered or dropped) must make the checker fail.
"""

from __future__ import annotations

import pytest

from tests.support.capability import require_tool
from tests.support.crash import Materials, prepare
from tests.support.durability import check_durability, traced_publish
from tests.support.mounts import Mounts


@pytest.fixture(scope="module")
def sources(mounts: Mounts, engine: str) -> Materials:
    """The traced publishes' sources, on a mount per engine (conftest.py), so each engine's traces and stores
    are its own."""
    require_tool("strace", "strace")
    return prepare(mounts.tmpfs("noatime", size="256m") / "durability")


def test_a_real_publish_flushes_before_every_rename_and_fsyncs_each_new_name_before_returning(
        sources: Materials) -> None:
    problems, checked = traced_publish(sources, sources.base.parent, "correct")
    assert checked >= 8, "the checker must have seen the blob and manifest renames"
    assert problems == []


@pytest.mark.parametrize(("variant", "rule"), [
    ("rename-before-flush", "(rule 1)"),
    ("no-manifest-fsync", "(rule 1)"),
    ("no-name-dir-fsync", "(rule 2)"),
    ("no-blobs-dir-fsync", "(rule 2)"),
])
def test_a_publish_with_one_step_reordered_or_dropped_fails_the_checker(
        sources: Materials, variant: str, rule: str) -> None:
    problems, checked = traced_publish(sources, sources.base.parent, variant)
    assert checked >= 8
    assert any(rule in p for p in problems), problems


def test_the_checker_joins_a_call_that_another_process_interrupted() -> None:
    # With worker processes strace -f cuts a call in two when another process's line comes between.
    trace = "\n".join([
        '1 openat(AT_FDCWD</s>, "/s/staging/t/b", O_WRONLY|O_CREAT|O_EXCL, 0444) = 5</s/staging/t/b>',
        '1 write(5</s/staging/t/b>, ""..., 10) = 10',
        "1 syncfs(5</s/staging/t/b>) = 0",
        '1 renameat2(AT_FDCWD</s>, "/s/staging/t/b", AT_FDCWD</s> <unfinished ...>',
        '2 read(3</dev/null>, "", 10) = 0',
        '1 <... renameat2 resumed>, "/s/blobs/b", 0) = 0',
        "1 fsync(6</s/blobs>) = 0",
        '1 newfstatat(AT_FDCWD</s>, "/marker", 0x1, 0) = -1 ENOENT (No such file or directory)',
    ])
    assert check_durability(trace, "/s", "/marker") == ([], 1)
    unfsynced = trace.replace("1 fsync(6</s/blobs>) = 0\n", "")
    assert any("(rule 2)" in p for p in check_durability(unfsynced, "/s", "/marker")[0])


def test_the_checker_reads_a_hand_written_trace_of_the_right_order_as_clean() -> None:
    trace = "\n".join([
        '1 mkdir("/s/manifests/n", 0755) = 0',
        '1 openat(AT_FDCWD</s>, "/s/staging/t/m", O_WRONLY|O_CREAT|O_EXCL, 0444) = 5</s/staging/t/m>',
        '1 write(5</s/staging/t/m>, ""..., 10) = 10',
        "1 fsync(5</s/staging/t/m>) = 0",
        '1 renameat2(AT_FDCWD</s>, "/s/staging/t/m", AT_FDCWD</s>, "/s/manifests/n/1.j", RENAME_NOREPLACE) = 0',
        "1 fsync(6</s/manifests/n>) = 0",
        "1 fsync(7</s/manifests>) = 0",
        '1 newfstatat(AT_FDCWD</s>, "/marker", 0x1, 0) = -1 ENOENT (No such file or directory)',
    ])
    assert check_durability(trace, "/s", "/marker") == ([], 1)
    late = trace.replace("1 fsync(7</s/manifests>) = 0\n", "") + "\n1 fsync(7</s/manifests>) = 0"
    assert any("(rule 3)" in p for p in check_durability(late, "/s", "/marker")[0])

"""The diagnose engine on real filesystems: isolation holds, the control drifts, strangers are named."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from artifactkit.engine.reference.scan import capture_tree
from artifactkit.errors import IsolationError
from artifactkit.trace.engine import CycleProgress, DiagnoseConfig, copy2_tree, run_diagnose
from tests.support.mounts import Mounts, mounts_under

# A reader that is not one of ours: walks everything under argv[1] and reads every file, and after
# each pass that read something inside a diagnose work tree says so on stdout.
PLANTED_READER = """
import os, sys
base = sys.argv[1]
while True:
    hits = 0
    for top, _dirs, files in os.walk(base):
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as handle:
                    handle.read(1)
            except OSError:
                continue
            hits += "artifactkit-" in top
    if hits:
        print(hits, flush=True)
"""


def test_isolated_cycles_on_ext4_relatime_hold_every_check(ext4_relatime: Path) -> None:
    result = run_diagnose(DiagnoseConfig(cycles=3, base=str(ext4_relatime)))
    assert result.environment.isolation_mode == "flag"
    assert (result.checks, result.failed_checks, result.findings) == (6, 0, ())
    assert result.competing_reads > 0
    assert result.inotify.as_dict()["IN_OPEN"] > 0
    assert result.inotify.overflows == 0
    assert result.accesses.reader_accesses > 0
    assert not result.source_atime_moved
    assert not any(p.name.startswith("artifactkit-") for p in ext4_relatime.iterdir())  # cleaned up


def test_control_run_without_isolation_drifts_advanced_by_read(ext4_relatime: Path) -> None:
    # Without fanotify: its hold makes every open in the work tree wait ~25 us, which shifts when
    # reads land, and a read just after the store's own utime can leave atime at or below ctime,
    # indistinguishable from an omitted time (3 of 30 runs under load). The labels are the point here.
    result = run_diagnose(DiagnoseConfig(cycles=2, isolation="none", base=str(ext4_relatime), fanotify=False))
    assert result.environment.isolation_mode == "none"
    # The observation window includes a full pass of every reader, so every check sees a read.
    assert result.failed_checks == result.checks == 4
    assert set(result.by_diagnosis()) == {"advanced-by-read"}
    assert {f.stage for f in result.findings} == {"publish", "download"}


def test_without_readers_the_control_run_holds(ext4_relatime: Path) -> None:
    # Removing the competing readers removes the drift: it is theirs, not the store's.
    result = run_diagnose(DiagnoseConfig(cycles=2, isolation="none", readers=0, base=str(ext4_relatime)))
    assert result.failed_checks == 0
    assert result.competing_reads == 0


def test_shutil_copy2_drifts_without_isolation_and_the_source_atime_moved(ext4_relatime: Path) -> None:
    result = run_diagnose(DiagnoseConfig(cycles=2, isolation="none", copier="shutil", base=str(ext4_relatime)))
    assert result.failed_checks > 0
    assert "advanced-by-read" in result.by_diagnosis()
    assert result.source_atime_moved


def test_copy2_copies_the_atime_its_own_read_moved(ext4_relatime: Path, tmp_path: Path) -> None:
    # No readers at all: copy2 alone moves the source's atime (relatime, atime <= ctime after
    # utime) and then copies that moved value, because it stats the source after reading it.
    from artifactkit.conformance.corpus import materialize

    work = ext4_relatime / "copy2-alone"
    work.mkdir()
    supplied = {m.path: m for m in materialize("basic", work / "src")}
    copy2_tree(str(work / "src"), str(work / "dst"), list(supplied.values()))
    copied = {m.path: m for m in capture_tree(work / "dst")}
    source = {m.path: m for m in capture_tree(work / "src", hash_content=False)}
    files = [p for p, m in supplied.items() if m.kind == "file"]
    assert files
    for path in files:
        assert source[path].atime_ns > supplied[path].atime_ns
        assert copied[path].atime_ns == source[path].atime_ns
    subprocess.run(["rm", "-rf", str(work)], check=True)


def test_auto_on_a_noatime_mount_sets_no_flag_and_flag_is_refused(mounts: Mounts) -> None:
    noatime = mounts.tmpfs("noatime")
    result = run_diagnose(DiagnoseConfig(cycles=1, readers=1, base=str(noatime)))
    assert result.environment.isolation_mode == "noatime-mount"
    assert result.failed_checks == 0
    with pytest.raises(IsolationError, match="remedy"):
        run_diagnose(DiagnoseConfig(cycles=1, isolation="flag", base=str(noatime)))


def test_ramfs_cannot_be_isolated_and_the_error_names_the_remedy(mounts: Mounts) -> None:
    ramfs = mounts.ramfs()
    with pytest.raises(IsolationError, match=r"ramfs.*remedy: .*--base") as info:
        run_diagnose(DiagnoseConfig(cycles=1, isolation="flag", base=str(ramfs)))
    assert "--artifactkit-base" not in str(info.value)


def test_a_planted_reader_shows_up_as_unexplained_with_its_pid(ext4_relatime: Path) -> None:
    # Root already (the mount fixture requires it), so fanotify is there to name the stranger;
    # without it the accounting split is covered in test_watcher.
    # A base of its own: the mount is shared by the session's tests, and a reader walking whatever
    # they left there (each open held by the fanotify holder) once took over 30 s for one pass.
    base = ext4_relatime / "planted-reader"
    base.mkdir()
    planted = subprocess.Popen([sys.executable, "-c", PLANTED_READER, str(base)],
                               stdout=subprocess.PIPE, text=True)
    assert planted.stdout is not None
    stdout = planted.stdout

    def after_a_planted_read(step: CycleProgress) -> None:
        if step.cycle != 1:
            return
        # Block the run until the planted reader has read inside the work tree: then its
        # accesses certainly fell inside the traced run.
        ready, _, _ = select.select([stdout], [], [], 30)
        assert ready, "the planted reader never read inside the work tree"
        assert int(stdout.readline()) > 0

    try:
        result = run_diagnose(DiagnoseConfig(cycles=2, readers=2, base=str(base)),
                              progress=after_a_planted_read)
    finally:
        planted.kill()
        planted.wait()
        base.rmdir()  # diagnose cleaned its work tree up: anything left is a failure here
    accesses = result.accesses
    assert accesses.method == "fanotify"
    assert accesses.unexplained > 0
    named = {item.pid: item for item in accesses.attributed}
    assert planted.pid in named
    assert named[planted.pid].executable.startswith("python")
    assert os.getpid() not in named  # our own accesses are explained, not foreign
    assert result.failed_checks == 0  # isolation holds against a stranger too


# The outside reader: find starting a cat for every batch of files, in a loop. After each
# pass that read something inside a diagnose work tree, it says how many bytes. Paced (10 ms between
# passes) so it does not take a whole core from the tests beside it; each find and cat still lives
# for a few ms only.
OUTSIDE_LOOP = ('while :; do n=$(find "$1" -path "$1/artifactkit-*" -type f -exec cat {} + 2>/dev/null | wc -c); '
                '[ "$n" -gt 0 ] && echo "$n"; sleep 0.01; done')


def test_an_outside_find_cat_loop_is_named_to_its_last_short_lived_process(tmpfs_relatime: Path) -> None:
    from artifactkit.cli.diagnose import WIDTH, render
    from artifactkit.trace.procnames import UNKNOWN_EXITED
    from tests.support.capability import require_holding_openers

    require_holding_openers()
    base = Path(tempfile.mkdtemp(prefix="outside-", dir=tmpfs_relatime))
    loop = subprocess.Popen(["sh", "-c", OUTSIDE_LOOP, "sh", str(base)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert loop.stdout is not None
    stdout = loop.stdout

    def after_an_outside_read(step: CycleProgress) -> None:
        if step.cycle == 1:  # go on only once the loop's cats have read inside the work tree
            assert select.select([stdout], [], [], 30)[0], "the outside loop never read the work tree"
            assert int(stdout.readline()) > 0

    try:
        result = run_diagnose(DiagnoseConfig(cycles=3, readers=2, base=str(base)), progress=after_an_outside_read)
        assert mounts_under(base) == []  # the work tree's own mount went with it
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
        shutil.rmtree(base)
    acc = result.accesses
    assert acc.method == "fanotify"
    assert acc.hold is not None and acc.hold.mode == "permission"
    assert acc.unexplained > 0
    assert {item.executable for item in acc.attributed} == {"find", "cat"}
    assert all(item.named == "held" for item in acc.attributed)
    cats = [g for g in acc.groups if g.executable == "cat"]
    assert len(cats) == 1 and cats[0].chain[-1] == "find" and cats[0].processes >= 1
    summary = render(result, str(base))
    assert UNKNOWN_EXITED not in summary
    assert len(summary.splitlines()) <= 40
    assert max(len(line) for line in summary.splitlines()) <= WIDTH
    assert any(line.lstrip().startswith(cats[0].label) for line in summary.splitlines()), summary


def test_invalid_settings_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="cycles must be >= 1"):
        DiagnoseConfig(cycles=0)
    with pytest.raises(ValueError, match="no corpus tree"):
        DiagnoseConfig(corpus="nope")

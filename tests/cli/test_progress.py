"""Progress on a terminal only: the CLI under a pseudo-terminal shows it, in a pipe and under --json it is silent."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from artifactkit.cli.common import human_bytes
from artifactkit.cli.progress import counts, store_activity
from artifactkit.conformance.corpus import materialize
from artifactkit.store.progress import Progress


def _run(argv: list[str], *, stderr_tty: bool) -> tuple[int, str, bytes]:
    """Run the CLI; stderr on a pty's slave end (a terminal) or a pipe; return (exit, stdout, stderr bytes)."""
    # 80 columns, a terminal's default: the counts must fit in it (rich cuts what does not).
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80"}
    env.pop("NO_COLOR", None)
    if not stderr_tty:
        done = subprocess.run([sys.executable, "-m", "artifactkit.cli", *argv], capture_output=True, env=env,
                              check=False)
        return done.returncode, done.stdout.decode(), done.stderr
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "artifactkit.cli", *argv], stdout=subprocess.PIPE,
                                   stderr=slave, stdin=subprocess.DEVNULL, env=env)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal's last slave end
                break
            if not chunk:
                break
            seen += chunk
        out = process.stdout.read().decode() if process.stdout else ""
        return process.wait(), out, seen
    finally:
        os.close(master)


def _screen(raw: bytes) -> str:
    """What the terminal showed, as text: every frame rich drew, its control sequences taken out."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", raw.decode(errors="replace"))


#: A tree big enough for batches (the store reports about every 200 files): 20 directories of 100 files, each
#: file's content its own (so each is one blob) and over 1 KiB (so the bytes are in KiB, not B).
FILES = 2000


@pytest.fixture
def big_site(fast_tmp: Path) -> Path:
    for d in range(FILES // 100):
        folder = fast_tmp / "src" / f"d{d:02}"
        folder.mkdir(parents=True)
        for f in range(100):
            (folder / f"f{f:03}").write_bytes(f"{d} {f}\n".encode() * 200)
    return fast_tmp


#: What each command's line shows of its phases: the description, each phase by name, and the counts
#: (entries done/total, bytes done/total in binary units) as the last report left them.
#: verify and gc count the tree's objects among the blobs: one a directory of 100 files, one the root's.
BLOBS = FILES + FILES // 100 + 1
SHOWS = {
    "publish": ["publishing demo", "scan ", f"read {FILES}/{FILES} files", " MiB/"],
    "download": ["downloading demo", "fetch ", f"create {FILES}/{FILES} entries", " MiB/"],
    "verify": ["verifying", "manifests ", f"blobs {BLOBS}/{BLOBS}", " MiB/"],
    "gc": ["gc", "manifests ", f"sweep {BLOBS}/{BLOBS} blobs", " MiB/"],
}
#: A rate in whatever unit the machine's speed gives, and the time elapsed.
RATE, ELAPSED = r"\d+(\.\d)? (B|KiB|MiB|GiB)/s", r"\d:\d\d:\d\d"


@pytest.mark.parametrize("command", ["publish", "download", "verify", "gc"])
def test_a_long_command_shows_its_phases_and_counts_on_a_terminal_and_nothing_in_a_pipe(
        big_site: Path, command: str) -> None:
    store = str(big_site / "store")
    publish = ["publish", str(big_site / "src"), "--store", store, "--name", "demo"]
    argv = {"publish": publish, "download": ["download", "demo", str(big_site / "out"), "--store", store],
            "verify": ["verify", "--store", store], "gc": ["gc", "--store", store]}[command]
    if command == "gc":  # garbage to sweep: a version whose manifest is gone leaves every blob unreferenced
        assert _run([*publish[:-1], "doomed"], stderr_tty=False)[0] == 0
        shutil.rmtree(big_site / "store" / "manifests" / "doomed")
    elif command != "publish":
        assert _run(publish, stderr_tty=False)[0] == 0
    code, out, err = _run(argv, stderr_tty=True)
    assert code == 0, err
    screen = _screen(err)
    missing = [text for text in SHOWS[command] if text not in screen]
    assert not missing, f"{missing} not on the terminal:\n{screen}"
    assert re.search(RATE, screen) and re.search(ELAPSED, screen), screen
    assert out and "\x1b" not in out, "stdout (a pipe) gets the result only"
    if command == "download":
        os.rename(big_site / "out", big_site / "out1")
    code, out, err = _run(argv, stderr_tty=False)
    assert (code, err) == (0, b""), "a pipe gets no progress"


def test_counts_read_as_a_person_reads_them() -> None:
    mib = 1024 * 1024
    assert counts(Progress("scan", 120), 0.5) == "scan 120 entries  240 entries/s"
    assert counts(Progress("read", 0, 2000, 0, 13 * mib), 0.0) == "read 0/2000 files  0 B/13.0 MiB"
    assert counts(Progress("read", 1200, 2000, 8 * mib, 13 * mib), 2.0) \
        == "read 1200/2000 files  8.0 MiB/13.0 MiB  4.0 MiB/s"
    assert counts(Progress("blobs", 3, 9, 3000, 9000), 1.0) == "blobs 3/9  2.9 KiB/8.8 KiB  2.9 KiB/s"
    assert counts(Progress("manifests", 1, 2), 0.25) == "manifests 1/2  4 manifests/s"


def test_a_rate_keeps_its_width_whatever_the_speed_so_the_line_fits_80_columns() -> None:
    # A native download of 2,000 files ran at 103.0 MiB/s, and rich cut that line's "/s" at 80 columns.
    mib = 1024 * 1024
    assert counts(Progress("create", 2000, 2000, 2 * mib, 2 * mib), 2 / 103) \
        == "create 2000/2000 entries  2.0 MiB/2.0 MiB  103 MiB/s"
    for exponent in range(10, 41):
        for mantissa in (1.0, 1.5, 9.99, 99.9, 99.96, 103.0, 999.4, 999.6, 1023.9):
            number = human_bytes(int(mantissa * 2 ** exponent)).split()[0]
            assert len(number) <= 4, (mantissa, exponent, number)


def test_where_nothing_is_shown_the_store_gets_no_callback_and_rich_is_not_imported(big_site: Path) -> None:
    """In a pipe the store's progress is ``None`` (its reports cost a test) and rich is never loaded."""
    with store_activity("publishing demo", json_output=True) as progress:
        assert progress is None
    code = ("import sys; from artifactkit.cli.main import main; "
            f"main(['publish', {str(big_site / 'src')!r}, '--store', {str(big_site / 'store')!r}, '--name', 'x']); "
            "print('rich loaded' if any(m.split('.')[0] == 'rich' for m in sys.modules) else 'no rich')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "no rich" and done.stderr == ""


@pytest.fixture
def site(fast_tmp: Path) -> Path:
    materialize("basic", fast_tmp / "src")
    return fast_tmp


@pytest.mark.parametrize("command", ["publish", "download", "verify", "gc", "ls"])
def test_json_on_a_terminal_shows_no_progress_and_stdout_is_one_document(site: Path, command: str) -> None:
    store = str(site / "store")
    publish = ["publish", str(site / "src"), "--store", store, "--name", "demo"]
    if command != "publish":
        assert _run(publish, stderr_tty=False)[0] == 0
    argv = {"publish": publish, "download": ["download", "demo", str(site / "out"), "--store", store],
            "verify": ["verify", "--store", store], "gc": ["gc", "--store", store], "ls": ["ls", "--store", store]}
    code, out, err = _run([*argv[command], "--json"], stderr_tty=True)
    assert (code, err) == (0, b"")
    assert json.loads(out)["schema"] == f"artifactkit.{command}/1"


def test_an_error_on_a_terminal_under_json_is_one_line_and_one_document(site: Path) -> None:
    """The error's line on the terminal (no progress left on it), its document on stdout."""
    code, out, err = _run(["verify", "--store", str(site / "typo"), "--json"], stderr_tty=True)
    assert code == 2 and err.count(b"\n") == 1 and b"\x1b" not in err, err
    assert json.loads(out)["type"] == "NotAStoreError"


@pytest.mark.parametrize(("argv", "what"), [
    (["diagnose", "--cycles", "3", "--isolation", "none", "--copier", "shutil"], b"cycles"),
    (["conformance", "--copier", "artifactkit", "--corpus", "basic"], b"conformance of artifactkit"),
], ids=["diagnose", "conformance"])
def test_diagnose_and_conformance_show_the_same_progress_on_a_terminal_only(
        site: Path, argv: list[str], what: bytes) -> None:
    argv = [*argv, "--base", str(site)]
    code, _, err = _run(argv, stderr_tty=True)
    assert code in (0, 1), err  # 1: mismatches found (shutil drops atimes), not a setup error
    assert b"\x1b[" in err and what in err, err
    code, _, err = _run(argv, stderr_tty=False)
    assert code in (0, 1) and err == b"", "a pipe gets no progress"

"""A cleanup holds Ctrl-C (a second one never cuts it short) and is bounded once an interrupt is part of it; what it
leaves then is a leftover the sweep or gc removes (``artifactkit/store/cleanup.py``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from artifactkit._fsutil import remove_tree
from artifactkit.cli import interrupts
from artifactkit.store import cleanup
from artifactkit.store.cleanup import cleaning_up
from artifactkit.store.private_dir import MARKER, PrivateDir, sweep_abandoned
from artifactkit.store.user_cache import private_dir_key


def _files(root: Path, count: int) -> Path:
    (root / "sub").mkdir(parents=True)
    for index in range(count):
        (root / "sub" / f"f{index}").write_bytes(b"x")
    return root


@pytest.fixture
def python_handles_sigint() -> object:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_handles_sigint")
def test_a_ctrl_c_during_a_cleanup_is_held_until_it_ends_then_raised() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), cleaning_up() as over:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # and a second: still held
        done.append(over())  # the budget runs from the first Ctrl-C: not over yet
        done.append("finished")
    assert done == [False, "finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("python_handles_sigint")
def test_a_cleanup_of_an_interrupt_is_bounded_and_raises_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cleanup, "CLEANUP_BUDGET_S", 0.0)
    with cleaning_up(KeyboardInterrupt()) as over:
        os.kill(os.getpid(), signal.SIGINT)  # the interrupt in flight is the one raised: this one is dropped
        assert over()
    with cleaning_up() as over:
        assert not over()  # no interrupt: a cleanup runs to its end


@pytest.mark.usefixtures("python_handles_sigint")
def test_the_bound_counts_from_the_ctrl_c_the_console_script_saw_not_from_the_cleanup_s_start() -> None:
    """The engine's stop on loaded cores came on top of the 1 s when the budget began with the cleanup."""
    try:
        cleanup.note_press(time.monotonic_ns() - int(cleanup.CLEANUP_BUDGET_S * 1e9))  # a second ago
        with cleaning_up(KeyboardInterrupt()) as over:
            assert over()
        interrupts.handle_interrupts()  # a new command: an earlier command's press no longer counts
        with cleaning_up(KeyboardInterrupt()) as over:
            assert not over()
    finally:
        cleanup.note_press(None)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_cleanup_off_the_main_thread_is_neither_held_nor_bounded() -> None:
    seen = []

    def clean() -> None:
        with cleaning_up(KeyboardInterrupt()) as over:
            seen.append((over(), signal.getsignal(signal.SIGINT)))

    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=clean)
    worker.start()
    worker.join()
    assert seen == [(False, before)]


def test_a_stopped_removal_leaves_a_tree_the_next_removal_takes(tmp_path: Path) -> None:
    root = _files(tmp_path / "tree", 50)
    asked = iter(range(10**6))
    assert remove_tree(root, stop=lambda: next(asked) >= 20) is False
    left = len(os.listdir(root / "sub"))
    assert 0 < left < 50
    assert remove_tree(root) is True and not root.exists()


@pytest.mark.usefixtures("python_handles_sigint")
def test_a_private_dir_whose_cleanup_an_interrupt_cut_short_is_left_marked_for_the_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = private_dir_key()
    if key is None:
        pytest.skip("no usable private-directory key in this user's cache")
    made = PrivateDir(str(tmp_path), ".out.artifactkit-")
    os.mkdir("tree", dir_fd=made.fd)
    for index in range(20):
        os.close(os.open(f"tree/f{index}", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=made.fd))
    monkeypatch.setattr(cleanup, "CLEANUP_BUDGET_S", 0.0)

    def interrupted() -> None:
        try:
            raise KeyboardInterrupt
        finally:
            made.close()  # as restore_tree's finally does, on its way out of the interrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    left = tmp_path / made.name
    assert (left / MARKER).is_file() and (left / "tree").is_dir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert sweep_abandoned(fd, ".out.artifactkit-", 12, key) == [made.name]
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_the_commands_handler_raises_once_then_only_notes(capfd: pytest.CaptureFixture[str]) -> None:
    previous = signal.getsignal(signal.SIGINT)
    try:
        interrupts.handle_interrupts()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        interrupts.ignore_interrupts()
        os.kill(os.getpid(), signal.SIGINT)  # the exit code is decided: nothing happens
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capfd.readouterr().err == interrupts.AGAIN.decode() * 2

"""The store lock's turnstile: once gc waits, no new publisher may start ahead of it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from artifactkit.store import locks as locks_module


@contextlib.contextmanager
def store_lock(locks: str, *, exclusive: bool) -> Iterator[None]:
    """The store lock of the locks directory ``locks``, reached through its fd as the store does."""
    fd = os.open(locks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with locks_module.store_lock(fd, exclusive=exclusive, where=locks):
            yield
    finally:
        os.close(fd)


def turnstile_is_held(locks: Path) -> bool:
    fd = os.open(locks / "turnstile.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_waiting_gc_holds_the_turnstile_so_new_publishers_queue_behind_it(fast_tmp: Path) -> None:
    locks = fast_tmp / "locks"
    locks.mkdir()
    gc_ran = threading.Event()

    def gc() -> None:
        with store_lock(str(locks), exclusive=True):
            gc_ran.set()

    with store_lock(str(locks), exclusive=False):  # a publish in flight
        assert not turnstile_is_held(locks), "a publisher must not keep the turnstile"
        thread = threading.Thread(target=gc)
        thread.start()
        deadline = time.monotonic() + 10
        while not turnstile_is_held(locks):  # gc is now queued on the store lock
            assert time.monotonic() < deadline, "gc never reached the turnstile"
        assert not gc_ran.is_set(), "gc must wait for the publisher in flight"
    thread.join(timeout=10)
    assert gc_ran.is_set() and not turnstile_is_held(locks)


def test_a_publisher_arriving_while_gc_waits_goes_after_gc(fast_tmp: Path) -> None:
    locks = fast_tmp / "locks"
    locks.mkdir()
    order: list[str] = []
    late_publisher_in = threading.Event()

    def gc() -> None:
        with store_lock(str(locks), exclusive=True):
            order.append("gc")

    def late_publisher() -> None:
        with store_lock(str(locks), exclusive=False):
            late_publisher_in.set()
            order.append("late publisher")

    with store_lock(str(locks), exclusive=False):  # a publish in flight
        gc_thread = threading.Thread(target=gc)
        gc_thread.start()
        deadline = time.monotonic() + 10
        while not turnstile_is_held(locks):
            assert time.monotonic() < deadline, "gc never reached the turnstile"
        late = threading.Thread(target=late_publisher)
        late.start()
        # Without the publishers' pass through the turnstile the late publisher would share the
        # store lock at once (flock does not queue it behind the waiting gc) and get in first;
        # 0.5 s is ample for that to happen, and passing does not depend on it being short.
        assert not late_publisher_in.wait(0.5), "a new publisher overtook the waiting gc"
    gc_thread.join(timeout=10)
    late.join(timeout=10)
    assert order == ["gc", "late publisher"]

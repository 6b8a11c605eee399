"""A real writer that changes a file at the instant a reader's n-th read of it begins, whoever the reader is.

fanotify's ``FAN_ACCESS_PERM`` on the file's inode makes every read of its content (``read``, ``pread``,
``copy_file_range``, ``sendfile``) wait in the kernel until this process answers; the n-th is answered only
once ``change`` has run. So the change lands after the reader opened and checked the file and before the
bytes of that read are taken — deterministically, without a clock, and the same on the reference engine's
``os.pread`` and the native core's threads: no patched function, the situation itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from artifactkit._fanotify import FanMask, FanotifyUnavailable, allow, mark_file, open_group, parse
from tests.support.capability import require_holding_openers, skip_or_fail


@contextlib.contextmanager
def changed_at_read(path: Path, change: Callable[[], None], *, at: int = 1) -> Iterator[list[int]]:
    """Run ``change`` when the ``at``-th read of ``path`` begins (held in the kernel until it is done); yields
    the reads seen so far, as a list that grows (``len(...) >= at``: the change happened). ``change`` must not
    read ``path`` itself: it would wait for its own answer."""
    require_holding_openers()  # CAP_SYS_ADMIN: a test that needs this skips (fails in CI) without it
    group = open_group(permission=True)
    try:
        mark_file(group, str(path), FanMask.FAN_ACCESS_PERM)
    except FanotifyUnavailable as err:
        os.close(group)
        skip_or_fail(f"needs FAN_ACCESS_PERM on {path.parent}: {err}")
        raise
    reads: list[int] = []
    failed: list[BaseException] = []
    wake_read, wake_write = os.pipe()

    def answer() -> None:
        while True:
            ready, _, _ = select.select([group, wake_read], [], [])
            if wake_read in ready:
                return
            try:
                events = parse(os.read(group, 4096))
            except BlockingIOError:
                continue
            for event in events:
                try:
                    reads.append(event.pid)
                    if len(reads) == at:
                        change()
                except BaseException as err:  # noqa: BLE001 - raised in the test's thread at the end
                    failed.append(err)
                finally:
                    allow(group, event.fd)
                    os.close(event.fd)

    thread = threading.Thread(target=answer, name="read-race", daemon=True)
    thread.start()
    try:
        yield reads
    finally:
        os.write(wake_write, b"x")
        thread.join()
        os.close(group)  # any read still held is let through by the kernel
        os.close(wake_read)
        os.close(wake_write)
    if failed:
        raise failed[0]

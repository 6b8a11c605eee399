"""Release a copier blocked opening a FIFO of the source, and say so: a conformance run never hangs on one.

A copier that treats a FIFO as a file opens it for reading, and ``open`` blocks until a writer comes, which is
never. A command copier is killed at its timeout (:func:`~artifactkit.conformance.copiers.run_with_timeout`), but
an in-process one (the ``zipfile`` adapter: ``ZipFile.write`` opens what it is given, measured blocking for
good on ``special-files``) and a tool an adapter runs cannot be. So while a copier runs, a watchdog waits for
the same limit plus a second (a command is killed first, then no reader is left), and from then on opens each
source FIFO for writing with ``O_NONBLOCK`` once a second: that succeeds only when a reader is waiting, and
closing it at once hands the reader an end of file. The copier goes on with an empty "file", and the run is
reported as a copier failure naming the FIFOs and the limit. Nothing is written, so no time of the FIFO moves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable, Iterator

#: After the limit, how often the watchdog looks for a reader again (a copier may open the next FIFO).
_POLL_S = 1.0
#: Past the command timeout: a killed command leaves no reader, so only what cannot be killed is released.
_GRACE_S = 1.0


class FifoWatch:
    """What the watchdog released: FIFO paths relative to the source, in release order."""

    def __init__(self) -> None:
        self.released: list[str] = []


@contextlib.contextmanager
def release_blocked_fifos(src: str, fifos: Iterable[str], *, timeout_s: float) -> Iterator[FifoWatch]:
    """Run the body with a watchdog over ``fifos`` (paths under ``src``); see the module docstring."""
    watch = FifoWatch()
    paths = sorted(fifos)
    done = threading.Event()

    def patrol() -> None:
        if done.wait(timeout_s + _GRACE_S):
            return
        while not done.is_set():
            for path in paths:
                if _release(os.path.join(src, path)) and path not in watch.released:
                    watch.released.append(path)
            done.wait(_POLL_S)

    guard = threading.Thread(target=patrol, name="artifactkit-fifo-watch", daemon=True)
    if paths:
        guard.start()
    try:
        yield watch
    finally:
        done.set()
        if paths:
            guard.join()


def _release(path: str) -> bool:
    """Open ``path`` for writing without blocking and close it: ``True`` when a reader was waiting on it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.ENOENT, errno.ELOOP, errno.EACCES, errno.EPERM):
            return False  # no reader (ENXIO), or no longer our FIFO: nothing to release
        raise
    os.close(fd)
    return True

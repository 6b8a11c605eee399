"""Ctrl-C in a running command: the first stops it; the ones after it, while it cleans up, wait for the cleanup.

The console script (:mod:`artifactkit.cli.entry`) installs :func:`handle_interrupts` once the command's modules are
imported. The first SIGINT is a ``KeyboardInterrupt``, so every ``finally`` runs: the engine stops, a publish's
staging and a download's hidden directory are removed within a bound (:mod:`artifactkit.store.cleanup`). A second
or third Ctrl-C used to be another ``KeyboardInterrupt`` raised wherever that unwinding was (inside the engine's
stop, a removal, a thread pool's shutdown), cutting the cleanup short: a staging of 97 k files, a hidden directory
of 10-38 k entries beside a destination (issue 53). Now each one after the first only says on stderr that the
cleanup is finishing; the command still ends within the cleanup's bound, exit 130. SIGQUIT (Ctrl-\\) or a kill ends
it at once, leaving what ``gc`` and the next download remove.
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType
from typing import Final

from artifactkit.store.cleanup import note_press

#: What a Ctrl-C after the first says (stderr): the command is already on its way out.
AGAIN: Final = b"artifactkit: interrupted again: finishing the cleanup (at most a second)\n"


class _Interrupts:
    """The SIGINT handler of a running command: raises once, then only notes."""

    def __init__(self) -> None:
        self.presses = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses == 1:
            note_press(time.monotonic_ns())  # the cleanup's bound counts from here
            raise KeyboardInterrupt
        # os.write, not sys.stderr: a handler may run between any two bytecodes, a print of the command's own
        # included, and a buffered stream is not reentrant.
        os.write(2, AGAIN)


def handle_interrupts() -> None:
    """From now on the first SIGINT raises ``KeyboardInterrupt`` and later ones are noted on stderr."""
    note_press(None)
    signal.signal(signal.SIGINT, _Interrupts())


def ignore_interrupts() -> None:
    """Once the exit code is decided (the command returned, or a Ctrl-C ended it): a Ctrl-C while the
    interpreter ends changes nothing (it killed the process by SIGINT, exit -2 instead of 130, once Python had
    given SIGINT its default back), and prints nothing after the command's last line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

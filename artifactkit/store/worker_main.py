"""A worker process of :mod:`artifactkit.store.workers`:
``python -S -P -m artifactkit.store.worker_main PARENT_PID TASK``.

Reads ``(shared, batch)`` messages on stdin, answers ``("ok", result)`` or ``("err", exception)``
on stdout, and exits at end of input. It dies with its parent (``PR_SET_PDEATHSIG``), so a killed
publisher leaves no worker writing into its abandoned staging directory.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
from typing import Any, Final

from artifactkit.store.worker_frames import read_frame, write_frame

#: task -> (module, function). Only the task's module is imported: start-up is paid per operation.
TASKS: Final = {"publish": ("artifactkit.store.stage", "stage_batch"),
                "download": ("artifactkit.store.download", "create_batch")}
_PR_SET_PDEATHSIG: Final = 1


def _die_with(parent: int) -> None:
    # CDLL(None): the C library already loaded into this process (ctypes.util would cost 15 ms of imports).
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl took effect
        os._exit(1)


def main() -> int:
    _die_with(int(sys.argv[1]))
    module, name = TASKS[sys.argv[2]]
    function = getattr(importlib.import_module(module), name)
    # SIGINT is the parent's to handle (it kills us when it gives up); a terminal's Ctrl-C reaches
    # the whole process group and must not leave a half-written result here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = sys.stdin.buffer
    # The answers get a descriptor of their own and fd 1 becomes stderr: a stray print (ours, or a C
    # library's) can then never corrupt the stream of frames.
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    write_frame(answers, ("ready", None))  # imports done: the parent sends work only from now on
    while True:
        try:
            shared, batch = read_frame(requests)
        except EOFError:
            return 0
        try:
            answer: tuple[str, Any] = ("ok", function(shared, batch))
        except Exception as err:  # noqa: BLE001 - sent to the parent, which raises it
            import traceback  # noqa: PLC0415 - only on failure: start-up is paid per operation
            # The traceback does not cross the pipe; a note does (it lives in the exception's __dict__).
            err.add_note(f"raised in worker process {os.getpid()}:\n{''.join(traceback.format_exception(err))}")
            answer = ("err", err)
        try:
            write_frame(answers, answer)
        except Exception as err:  # noqa: BLE001 - an exception that does not pickle
            write_frame(answers, ("err", RuntimeError(f"worker: {type(err).__name__}: {err}")))


if __name__ == "__main__":
    sys.exit(main())

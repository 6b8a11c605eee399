"""An ``OSError`` that names the call that failed, as well as the path: "[Errno 5] listxattr: Input/output
error: 'a.txt'" says what a bare "a.txt: Input/output error" did not (a publish from rclone mount failed so,
and the call was ``listxattr``, not a read). The reference engine wraps its ``os`` calls on user data here;
the native core names the same call the same way (``Failure::Os.call``), so both engines' messages match.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from artifactkit.errors import ArtifactkitError

P = ParamSpec("P")
T = TypeVar("T")


def named(call: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, an ``OSError`` of it naming ``call`` (see :func:`calling`)."""
    with calling(call):
        return fn(*args, **kwargs)


@contextlib.contextmanager
def calling(call: str) -> Iterator[None]:
    """Re-raise an ``OSError`` of the block as the same error with ``call`` before its strerror: the same class
    (``FileNotFoundError`` stays one), errno, filenames and cause. One already named (an inner call's), one of ours,
    or one without an errno passes as it is."""
    try:
        yield
    except OSError as err:
        if not _namable(err):
            raise
        # Its cause, not itself, as the cause: the same error reworded, as the core's is (``same_error``).
        raise type(err)(err.errno, f"{call}: {err.strerror}", err.filename, None, err.filename2) from err.__cause__


def _namable(err: OSError) -> bool:
    # Only the builtin classes: their constructor is OSError's. os.strerror's texts hold no ": ".
    return (err.errno is not None and not isinstance(err, ArtifactkitError) and type(err).__module__ == "builtins"
            and ": " not in (err.strerror or ""))

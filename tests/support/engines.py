"""The two engines as test parameters: the pure-Python reference and the native core.

``ARTIFACTKIT_ENGINE`` picks the engine for this process and every child it starts (the fault suite's
traced and killed publishes), so a test runs on an engine by setting it. The native core is built by
``pip install -e .`` where cargo is; elsewhere a test asking for it skips, and under
``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI as root, which builds it) fails instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

import pytest

from artifactkit.engine.select import ENGINE_SETTING, native_available
from tests.support.capability import skip_or_fail

#: Every engine a behaviour must hold on, the reference first.
ENGINE_NAMES: Final = ("python", "native")


def require_engine(name: str) -> None:
    """A skip (a failure in CI) when ``name`` is the native core and it is not built here."""
    if name == "native" and not native_available():
        skip_or_fail("the native core artifactkit._native is not built here; `pip install -e .` builds it where "
                     "cargo is on PATH")


@contextlib.contextmanager
def running_on(name: str) -> Iterator[str]:
    """``ARTIFACTKIT_ENGINE=name`` for the block (this process and its children), after :func:`require_engine`."""
    require_engine(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENGINE_SETTING, name)
        yield name

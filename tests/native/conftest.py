"""The differential tests' fixtures: the native core (or a skip saying why not) and scratch directories.

The core is built by ``pip install -e .`` where cargo is; elsewhere these tests skip, except under
``ARTIFACTKIT_REQUIRE_FS_MATRIX=1`` (CI as root, which builds it), where a missing core is a failure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.capability import skip_or_fail


@pytest.fixture(scope="session")
def native() -> ModuleType:
    """``artifactkit.engine.native`` over a built core, or a skip (a failure in CI) saying why."""
    try:
        return importlib.import_module("artifactkit.engine.native")
    except ImportError as err:
        skip_or_fail(f"the native core artifactkit._native is not built here ({err}); `pip install -e .` "
                     "builds it where cargo is on PATH")
        raise


@pytest.fixture
def work(fast_tmp: Path) -> Iterator[Callable[[str], Path]]:
    """Fresh named directories under the test's tmpfs directory."""
    made: list[Path] = []

    def make(name: str) -> Path:
        path = fast_tmp / f"{name}-{len(made)}"
        path.mkdir()
        made.append(path)
        return path
    yield make

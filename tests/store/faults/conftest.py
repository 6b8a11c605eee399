"""The fault suite runs on both engines: every test here once on the reference and once on the native core
(issue 28: "the faults on both"). Module-scoped, so a module's expensive recordings (``test_crash``'s
points, ``test_durability``'s traces) are made per engine too: they depend on ``engine``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.engines import ENGINE_NAMES, running_on


@pytest.fixture(scope="module", params=ENGINE_NAMES, autouse=True)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine this module's tests run on, set for them and for every process they start."""
    with running_on(request.param) as name:
        yield name

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``test_hostile_trees``'s cases in parts run on the native engine and a local store only: what a part adds
    (the walk in path order, a part's listing, the first names looked up) is the same Python on every engine and
    store, and both engines' parse of a part is held equal by ``tests/store/test_download_parts.py``; whole, every
    case runs on every combination. Deselected, not skipped: the README's suite keeps within its 10 minutes."""
    def dropped(item: pytest.Item) -> bool:
        params = getattr(item, "callspec", None)
        chosen = params.params if params is not None else {}
        return chosen.get("download_shape") == "in-parts" and (chosen.get("engine") != "native"
                                                               or chosen.get("store") != "local")
    gone = [item for item in items if dropped(item)]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if not dropped(item)]

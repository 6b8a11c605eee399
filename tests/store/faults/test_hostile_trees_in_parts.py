"""Every hostile tree of :mod:`tests.store.faults.test_hostile_trees` downloaded in parts of one entry (issue 52,
bounded memory): the walk in path order and each part's listing hold every refusal a whole download makes, with
nothing left at the destination."""

from __future__ import annotations

import pytest

from artifactkit.manifest import tree_parts
from tests.store.faults.test_hostile_trees import *  # noqa: F403  # the same tests, collected again under parts
from tests.store.faults.test_hostile_trees import store  # noqa: F401  # its fixture, named for ruff


@pytest.fixture(autouse=True)
def in_parts_of_one_entry(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    # Each part lists the directories it lies in: parts of one entry down a chain of 2,049 directories would parse
    # two million ancestor lines before the path bound refuses the last, so that chain is cut every 100 entries.
    deep = "deeper_than_any_path" in request.node.name
    monkeypatch.setattr(tree_parts, "PART_ENTRIES", 100 if deep else 1)

"""Which engine an operation gets: ``workers`` checked once for every engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.store.engines import ENGINE_SETTING, executor_for


def test_workers_below_one_are_refused_on_every_engine_before_a_store_is_made(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_SETTING, "python")  # the check comes before the engine is chosen
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="workers must be at least 1, not 0"):
        Store(fast_tmp / "store").publish(fast_tmp / "src", "demo", workers=0)
    assert not (fast_tmp / "store").exists()
    with pytest.raises(ValueError, match="workers must be at least 1, not -2"):
        executor_for(-2, "download")


"""Which engine an operation gets, said as it is (``engines.engine_info``: ``--version`` and the diagnose
evidence show it), and ``workers`` checked once for every engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from artifactkit import Store
from artifactkit.engine import select as engines
from artifactkit.engine.select import ENGINE_SETTING, EngineInfo, engine_for, engine_info


def _without_core(monkeypatch: pytest.MonkeyPatch, *, built: bool) -> None:
    """This process as where the core's executor cannot be imported: the core not built at all, or built
    (a module that is there) and its executor refused."""
    monkeypatch.setitem(engines.ENGINES, "native", "artifactkit.store._no_such_engine:NativeEngine")
    monkeypatch.setattr(engines, "CORE_MODULE", "artifactkit.engine.select" if built else "artifactkit._no_such_core")


def test_the_reference_selected_by_the_setting_is_said_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_SETTING, "python")
    info = engine_info()
    assert info == EngineInfo("python", selected=True, threads=None, usable=True, problem="")
    assert info.describe() == "python, selected by ARTIFACTKIT_ENGINE"


def test_the_reference_by_default_says_the_core_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_SETTING, raising=False)
    _without_core(monkeypatch, built=False)
    info = engine_info()
    assert (info.name, info.selected, info.usable) == ("python", False, True)
    assert info.describe() == "python; the native core is not built"


def test_the_reference_by_default_says_why_a_built_core_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_SETTING, raising=False)
    _without_core(monkeypatch, built=True)
    info = engine_info()
    assert info.name == "python"
    assert info.describe().startswith("python; the native core is built but not used: No module named "), info


def test_the_native_core_selected_by_the_setting_says_its_threads(use_engine: Callable[[str], None]) -> None:
    use_engine("native")
    cores = len(os.sched_getaffinity(0))
    info = engine_info()
    assert info == EngineInfo("native", selected=True, threads=cores, usable=True, problem="")
    assert info.describe() == f"native, {cores} thread{'s' if cores != 1 else ''}, selected by ARTIFACTKIT_ENGINE"


def test_the_native_core_never_runs_more_threads_than_usable_cores(use_engine: Callable[[str], None]) -> None:
    # --workers 10000 started 10,000 threads per core call before the cap; asking fewer is honoured.
    use_engine("native")
    cores = len(os.sched_getaffinity(0))
    from artifactkit.engine.native import NativeEngine

    many, one = engine_for(10000, "publish"), engine_for(1, "download")
    assert isinstance(many, NativeEngine) and isinstance(one, NativeEngine)
    assert (many.threads, one.threads) == (cores, 1)


def test_a_setting_that_cannot_run_is_described_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_SETTING, "native")
    _without_core(monkeypatch, built=False)
    info = engine_info()
    assert not info.usable
    assert info.describe() == "none; ARTIFACTKIT_ENGINE=native, but the native core is not built"
    monkeypatch.setenv(ENGINE_SETTING, "rust")
    assert engine_info().describe() == "none; ARTIFACTKIT_ENGINE='rust': the engines are python, native"


def test_workers_below_one_are_refused_on_every_engine_before_a_store_is_made(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_SETTING, "python")  # the check comes before the engine is chosen
    (fast_tmp / "src").mkdir()
    (fast_tmp / "src" / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="workers must be at least 1, not 0"):
        Store(fast_tmp / "store").publish(fast_tmp / "src", "demo", workers=0)
    assert not (fast_tmp / "store").exists()
    with pytest.raises(ValueError, match="workers must be at least 1, not -2"):
        engine_for(-2, "download")


"""Which engine (:mod:`~artifactkit.engine.protocol`) an operation gets.

``ARTIFACTKIT_ENGINE=python`` selects the reference; the default is the native core where it is built and
its engine is registered in :data:`ENGINES`, else the reference. :func:`engine_info` says which one an
operation would get now, and why (``artifactkit --version``, the diagnose evidence).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Final

import attrs

from artifactkit.engine.protocol import Engine
from artifactkit.engine.reference.engine import PythonEngine

#: The environment variable that picks the engine (``python``: the reference; ``native``: the core, an
#: error where it is not built).
ENGINE_SETTING: Final = "ARTIFACTKIT_ENGINE"
#: engine name -> ``module:class`` of its engine, imported on first use (a missing module: not built).
ENGINES: Final = {"native": "artifactkit.engine.native:NativeEngine"}
#: The extension module the native engine runs on: absent where no Rust toolchain built it.
CORE_MODULE: Final = "artifactkit._native"


def engine_name() -> str:
    """The engine an operation gets now: ``ARTIFACTKIT_ENGINE``, else ``native`` where it is built."""
    asked = os.environ.get(ENGINE_SETTING, "")
    if asked:
        if asked != "python" and asked not in ENGINES:
            raise ValueError(f"{ENGINE_SETTING}={asked!r}: the engines are python, {', '.join(ENGINES)}")
        return asked
    return "native" if native_available() else "python"


def native_available() -> bool:
    """Whether the native core is built and its engine importable."""
    return _native_problem() == ""


def _native_problem() -> str:
    """Why the native engine cannot be imported here ("" if it can)."""
    module = ENGINES["native"].partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as err:
        if importlib.util.find_spec(CORE_MODULE) is None:
            return "the native core is not built"
        return f"the native core is built but not used: {err}"
    return ""


def engine_for(workers: int | None, task: str) -> Engine:
    """A fresh engine for one ``task`` ("publish", "download" or "parse") with ``workers`` as the caller asked:
    ``None`` (the engine's default) or a positive number, checked here for every engine alike."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    name = engine_name()
    if name == "python":
        return PythonEngine(workers, task)
    module, _, attr = ENGINES[name].partition(":")
    engine: Engine = getattr(importlib.import_module(module), attr)(workers, task)
    return engine


@attrs.frozen
class EngineInfo:
    """Which engine a publish or download would run on now, and why (never an exception: a setting that
    names no usable engine is described, so ``--version`` can say what is wrong)."""

    #: ``"python"`` or ``"native"`` (or, with :attr:`usable` false, what ``ARTIFACTKIT_ENGINE`` says).
    name: str
    #: Picked by ``ARTIFACTKIT_ENGINE`` (else by default: the core where it is built).
    selected: bool
    #: The native core's threads when ``workers`` is not given (``None``: the reference, one process).
    threads: int | None
    #: Whether an operation can run on it (false: every publish and download fails as :attr:`problem` says).
    usable: bool
    #: Why the native core is not in use, or why the selected engine cannot run ("" when there is nothing to say).
    problem: str

    def describe(self) -> str:
        """One line for people: ``native, 2 threads`` or ``python; the native core is not built``."""
        if not self.usable:
            return f"none; {self.problem}"
        parts = [self.name]
        if self.threads is not None:
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.selected:
            parts.append(f"selected by {ENGINE_SETTING}")
        return ", ".join(parts) + (f"; {self.problem}" if self.problem else "")


def engine_info() -> EngineInfo:
    """What :func:`engine_for` would give an operation now, with ``workers`` not given."""
    selected = bool(os.environ.get(ENGINE_SETTING, ""))
    try:
        name = engine_name()
    except ValueError as err:
        return EngineInfo(os.environ[ENGINE_SETTING], selected=True, threads=None, usable=False, problem=str(err))
    problem = "" if selected and name == "python" else _native_problem()
    if name == "native" and problem:  # asked for by the setting, and it cannot load
        return EngineInfo(name, selected=True, threads=None, usable=False,
                          problem=f"{ENGINE_SETTING}=native, but {problem}")
    engine = engine_for(None, "publish")
    try:
        threads = engine.threads
    finally:
        engine.close()
    return EngineInfo(name, selected=selected, threads=threads, usable=True, problem=problem)

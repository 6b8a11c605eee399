"""Named adapters: the stores people actually run, driven the way each tool's own docs say.

``artifactkit conformance --copier NAME`` takes any name in :data:`ADAPTERS`. Each module documents
every command and option it uses and why. A tool that is not installed raises
:class:`~artifactkit.errors.ToolMissingError` naming the package; a step that exits non-zero raises
:class:`~artifactkit.errors.ToolFailedError` with its full command and stderr (both setup errors,
exit 2). Every adapter function also takes ``log=``, a list that receives each command it ran
(paths replaced by ``{src}``, ``{dst}``, ``{tmp}``): the evidence ``diagnostics/real_stores.py`` keeps.
"""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
import types
from typing import Final, Protocol

from artifactkit.conformance.adapters import _tool


class Adapter(Protocol):
    def __call__(self, src: str, dst: str, *, log: list[str] | None = None) -> None: ...


#: name -> (module, function); modules load on use (dvc, mlflow and friends are subprocesses anyway).
ADAPTERS: Final = {
    "restic": ("restic", "restic"),
    "borg": ("borg", "borg"),
    "borg-atime": ("borg", "borg_atime"),
    "dvc": ("dvc", "dvc"),
    "mlflow": ("mlflow", "mlflow"),
    "rclone": ("rclone", "rclone"),
    "rclone-metadata": ("rclone", "rclone_metadata"),
    "rclone-s3-metadata": ("rclone_s3", "rclone_s3_metadata"),
    "zip": ("info_zip", "zip_tree"),
    "zipfile": ("py_zipfile", "zipfile_tree"),
    "tarfile": ("py_tarfile", "tarfile_tree"),
    "tar-posix": ("gnu_tar", "tar_posix"),
    "bindfs": ("bindfs", "bindfs"),
    "bsdtar": ("bsdtar", "bsdtar"),
    "cpio": ("cpio", "cpio"),
    "pax": ("pax", "pax"),
    "squashfs": ("squashfs", "squashfs"),
    "7z": ("sevenzip", "sevenzip"),
}


def adapter(name: str) -> Adapter:
    """The adapter function called ``name`` (``KeyError`` names the known ones)."""
    if name not in ADAPTERS:
        raise KeyError(f"no adapter {name!r}; adapters: {', '.join(ADAPTERS)}")
    module, function = ADAPTERS[name]
    found: Adapter = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return found


def adapter_module(name: str) -> types.ModuleType:
    """The module that documents adapter ``name`` (its docstring lists every command and option)."""
    return importlib.import_module(f"{__name__}.{ADAPTERS[name][0]}")


def version(name: str) -> str:
    """The version of the tool behind ``name`` (raises :class:`ToolMissingError` when absent)."""
    module = adapter_module(name)
    if name in ("zipfile", "tarfile"):
        return f"Python {sys.version.split()[0]}"
    if name == "mlflow":
        done = subprocess.run([module.python(), "-c", "import mlflow; print(mlflow.__version__)"],
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        return f"mlflow {done.stdout.strip()}"
    return _tool.version(module.VERSION, module.PACKAGE, line_starts=getattr(module, "VERSION_LINE", ""),
                         tool=getattr(module, "TOOL", ""))


def runner(name: str, log: list[str] | None = None) -> functools.partial[None]:
    """``adapter(name)`` as a plain ``run(src, dst)``, appending the commands it runs to ``log``."""
    return functools.partial(adapter(name), log=log)


__all__ = ["ADAPTERS", "Adapter", "adapter", "adapter_module", "runner", "version"]

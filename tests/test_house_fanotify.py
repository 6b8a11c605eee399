"""fanotify in one place (issue 50 items 4a/4d moved it there): the kernel interface is ``artifactkit/_fanotify.py``,
below the rooms, and both of its users (``trace/``, ``conformance/``) import it; no other module of the package calls
the C functions or keeps a copy of the interface. The guard is a function the tests below also aim at a broken
tree."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "artifactkit"
INTERFACE = "_fanotify.py"
#: Looking up or calling the C functions, or defining the kernel's metadata version: whoever does holds a copy of
#: the interface (a message that names a function is no copy).
_KERNEL = re.compile(r"""["']fanotify_(?:init|mark)["']|\.fanotify_(?:init|mark)\(|FANOTIFY_METADATA_VERSION\s*[:=]""")


def fanotify_outside_its_module(package: Path) -> list[str]:
    """The modules of ``package``, other than the interface, that name fanotify's C functions or metadata."""
    return sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                  if path.name != INTERFACE or path.parent != package
                  if _KERNEL.search(path.read_text()))


def importers_of_the_interface(package: Path) -> set[str]:
    """The rooms (first folder under ``package``) whose modules import the interface."""
    return {path.relative_to(package).parts[0] for path in package.rglob("*.py")
            if re.search(rf"from {package.name}\._fanotify import|import {package.name}\._fanotify", path.read_text())}


def test_fanotify_lives_in_one_module_below_the_rooms_that_share_it() -> None:
    assert (PACKAGE / INTERFACE).is_file()
    assert fanotify_outside_its_module(PACKAGE) == []
    assert {"trace", "conformance"} <= importers_of_the_interface(PACKAGE)
    assert not (PACKAGE / "trace" / "fanotify.py").exists()  # moved, no shim left behind


def test_the_guard_sees_a_second_copy_of_the_interface(tmp_path: Path) -> None:
    package = tmp_path / "artifactkit"
    (package / "trace").mkdir(parents=True)
    (package / INTERFACE).write_text("def open_group():\n    return init.fanotify_init(0, 0)\n")
    (package / "trace" / "fanotify.py").write_text("FANOTIFY_METADATA_VERSION = 3\n")
    (package / "trace" / "holder.py").write_text("from artifactkit._fanotify import open_group\n")
    assert fanotify_outside_its_module(package) == ["trace/fanotify.py"]
    assert importers_of_the_interface(package) == {"trace"}

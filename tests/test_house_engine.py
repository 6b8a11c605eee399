"""The engine room's door, checked (issue 51): the core is imported by the native engine alone, no module outside
``artifactkit/engine/`` names a type of the core or of an engine (nor asks which engine made a value), and every
function the core exports has a caller in the package; no module takes another's private name (the native
engine's failures are built by public constructors, in the room each message belongs to); and the engine room is
below the store: nothing under ``engine/`` (nor ``manifest/``, ``metadata/``) imports ``store/``, which calls
them. Each guard is a function the tests below also aim at a broken tree. (``import artifactkit.pytest_plugin``
staying light is ``tests/test_house_store.py``'s.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "artifactkit"
CORE = "artifactkit._native"
#: The modules of the package that may import the core: the native engine and its table of failures.
CORE_IMPORTERS_MAX = 2
#: The door's types (``engine/values.py``): the store asks values of these what it needs, never whether they are one.
DOOR_TYPES = frozenset({"Captured", "ReadBatch", "EntryRun", "Parsed"})


def _modules(package: Path) -> dict[str, ast.Module]:
    return {str(path.relative_to(package.parent)): ast.parse(path.read_text())
            for path in sorted(package.rglob("*.py"))}


def core_importers(package: Path, core: str = CORE) -> list[str]:
    """The modules of ``package`` with an import of ``core`` (at any level, ``TYPE_CHECKING`` included)."""
    parent, _, leaf = core.rpartition(".")
    found = []
    for name, tree in _modules(package).items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Import) and any(a.name == core for a in node.names)) or (
                    isinstance(node, ast.ImportFrom) and node.level == 0
                    and (node.module == core or (node.module == parent and any(a.name == leaf for a in node.names)))):
                found.append(name)
                break
    return found


def private_types(package: Path, stub: Path) -> set[str]:
    """The core's classes (its stub's) and the classes the engines define for what crosses the door (the native
    engine's module, the reference's ``lists``), which only ``engine/`` may name."""
    names = {node.name for node in ast.walk(ast.parse(stub.read_text())) if isinstance(node, ast.ClassDef)}
    for module in ("engine/native.py", "engine/native_values.py", "engine/reference/lists.py"):
        path = package / module
        if path.is_file():
            names |= {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}
    return names


def names_outside_the_engine(package: Path, private: set[str], door: frozenset[str] = DOOR_TYPES) -> list[str]:
    """Every use outside ``engine/`` of a private type's name, and every ``isinstance`` on a door or private type."""
    offences = []
    for name, tree in _modules(package).items():
        if name.startswith(f"{package.name}/engine/"):
            continue
        for node in ast.walk(tree):
            named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
                next((a.name for a in node.names if a.name in private), None) if isinstance(node, ast.ImportFrom) \
                else None
            if named in private:
                offences.append(f"{name}:{node.lineno} names {named}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                    and len(node.args) == 2:
                asked = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.args[1])
                         if isinstance(n, ast.Name | ast.Attribute)}
                offences += [f"{name}:{node.lineno} isinstance on {t}" for t in sorted(asked & (door | private))]
    return offences


def imports_of(package: Path, room: str, imported: str) -> list[str]:
    """Every import of ``imported`` (the package or any module below it) by a module under ``room`` of ``package``:
    absolute or relative (resolved from the importing module), ``from X import Y`` counting ``X.Y``, at any level
    of the module (``TYPE_CHECKING`` and function bodies included)."""
    found = []
    for name, tree in _modules(package).items():
        if not name.startswith(f"{package.name}/{room}/"):
            continue
        here = name.removesuffix(".py").split("/")[:-1]  # the importing module's package
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*here[:len(here) - node.level + 1], *filter(None, [node.module])]) \
                    if node.level else node.module or ""
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            hit = next((t for t in targets if t == imported or t.startswith(f"{imported}.")), None)
            if hit is not None:
                found.append(f"{name}:{node.lineno} imports {hit}")
    return found


_EXPORTED = re.compile(r"wrap_pyfunction!\(\s*(?:[\w:]+::)?(\w+)\s*,")


def uncalled_core_functions(crate: Path, package: Path) -> list[str]:
    """The functions the core's ``#[pymodule]`` exports that no module of ``package`` calls as ``_native.NAME``."""
    exported = {name for path in crate.rglob("*.rs") for name in _EXPORTED.findall(path.read_text())}
    calls = {node.attr for tree in _modules(package).values() for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_native"}
    return sorted(exported - calls)


def private_names_imported(package: Path) -> list[str]:
    """Every ``from artifactkit.X import _name`` in ``package`` where ``_name`` is not a module (``_native``,
    ``_fsutil``...): a private helper borrowed across modules instead of a public constructor."""
    found = []
    for name, tree in _modules(package).items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == package.name):
                continue
            for alias in node.names:
                where = package.parent.joinpath(*node.module.split("."), alias.name)
                is_module = where.is_dir() or any(where.with_suffix(s).is_file() for s in (".py", ".pyi"))
                if alias.name.startswith("_") and not is_module:
                    found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
    return found


def test_at_most_two_modules_of_the_package_import_the_core_and_they_are_the_engines() -> None:
    importers = core_importers(PACKAGE)
    assert importers, "found no importer of the core: the guard would pass vacuously"
    assert len(importers) <= CORE_IMPORTERS_MAX, importers
    assert all(name.startswith("artifactkit/engine/") for name in importers), importers


def test_no_module_outside_the_engine_names_a_core_or_engine_type_or_asks_which_engine_made_a_value() -> None:
    private = private_types(PACKAGE, PACKAGE / "_native.pyi")
    assert {"CapturedTree", "StageState", "CoreTree", "KeptReads", "CapturedList"} <= private, private
    assert names_outside_the_engine(PACKAGE, private) == []


def test_every_function_the_core_exports_has_a_caller_in_the_package() -> None:
    crate = ROOT / "native" / "src"
    assert _EXPORTED.findall("\n".join(p.read_text() for p in crate.rglob("*.rs"))), "no export found: vacuous"
    assert uncalled_core_functions(crate, PACKAGE) == []


def test_no_module_imports_another_modules_private_name() -> None:
    assert private_names_imported(PACKAGE) == []


#: The rooms below the store (docs/architecture.md): the store calls them, never the other way.
BELOW_THE_STORE = ("engine", "manifest", "metadata")


def test_no_module_of_the_engine_room_or_below_imports_the_store() -> None:
    for room in BELOW_THE_STORE:
        assert any((PACKAGE / room).glob("*.py")), f"no {room} room: the guard would pass vacuously"
        assert imports_of(PACKAGE, room, "artifactkit.store") == [], room


def test_the_room_guard_sees_every_way_the_engine_can_import_the_store(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "engine/protocol.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from artifactkit.store.backend import PublishTxn\n",
        "engine/reference/stage.py": "from ...store import layout\nfrom ..values import Staged\n",
        "engine/native.py": "def f():\n    import artifactkit.store.content\n",
        "engine/select.py": "from artifactkit import store, errors\nfrom .. import metadata\n",
        "engine/plain.py": "from artifactkit.storehouse import x\nfrom artifactkit.engine.values import Parsed\n",
        "store/publish.py": "from artifactkit.engine.protocol import Engine\nfrom artifactkit.store import layout\n"})
    assert imports_of(package, "engine", "artifactkit.store") == [
        "artifactkit/engine/native.py:2 imports artifactkit.store.content",
        "artifactkit/engine/protocol.py:3 imports artifactkit.store.backend",
        "artifactkit/engine/reference/stage.py:1 imports artifactkit.store",
        "artifactkit/engine/select.py:1 imports artifactkit.store"]


def _package(tmp: Path, modules: dict[str, str]) -> Path:
    package = tmp / "artifactkit"
    for name, text in modules.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_import_guard_counts_every_importer_of_the_core(tmp_path: Path) -> None:
    package = _package(tmp_path, {"engine/native.py": "from artifactkit import _native\n",
                                  "engine/table.py": "import artifactkit._native\n",
                                  "store/publish.py": "def f():\n    from artifactkit._native import StageState\n",
                                  "store/plain.py": "from artifactkit import errors\n"})
    assert core_importers(package) == ["artifactkit/engine/native.py", "artifactkit/engine/table.py",
                                       "artifactkit/store/publish.py"]


def test_the_type_guard_sees_a_core_type_named_and_an_isinstance_on_a_door_type_outside_the_engine(
        tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "engine/native.py": "class CoreTree: ...\nx = isinstance(1, CoreTree)\n",
        "store/download.py": "from artifactkit.engine.native import CoreTree\ny = isinstance(2, ReadBatch)\n",
        "store/verify.py": "import artifactkit._native as core\nz: core.StageState\n"})
    stub = tmp_path / "_native.pyi"
    stub.write_text("class StageState: ...\n")
    assert names_outside_the_engine(package, private_types(package, stub)) == [
        "artifactkit/store/download.py:1 names CoreTree", "artifactkit/store/download.py:2 isinstance on ReadBatch",
        "artifactkit/store/verify.py:2 names StageState"]


def test_the_caller_guard_sees_an_exported_function_nobody_calls(tmp_path: Path) -> None:
    crate = tmp_path / "src"
    (crate / "py").mkdir(parents=True)
    (crate / "py" / "module.rs").write_text("m.add_function(wrap_pyfunction!(stage::stage_files, m)?)?;\n"
                                            "m.add_function(wrap_pyfunction!(scan_tree, m)?)?;\n")
    package = _package(tmp_path, {"engine/native.py": "from artifactkit import _native\n_native.stage_files()\n"})
    assert uncalled_core_functions(crate, package) == ["scan_tree"]


def test_the_private_name_guard_sees_a_private_helper_imported_and_lets_a_private_module_be(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "engine/native_errors.py": "from artifactkit import _native\nfrom artifactkit.store.content import _changed\n",
        "store/content.py": "def _changed(): ...\n", "_native.pyi": "", "_fsutil.py": "",
        "store/publish.py": "def f():\n    from artifactkit._fsutil import naming\n"
                            "    from artifactkit import _fsutil\n"})
    assert private_names_imported(package) == [
        "artifactkit/engine/native_errors.py:2 imports artifactkit.store.content._changed"]

"""The native crate's shape, checked (issue 51): rooms by concept that use each other one way and no module
cycle, PyO3 only in ``py/``, ``unsafe`` only in ``sys/`` and each block with its ``// SAFETY:`` line, every file
under 400 lines. Each guard is a function the tests below also aim at a small broken crate."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.crate_graph import code_of, crate_modules, rooms, use_graph
from tests.support.graphs import cycles

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "native" / "src" / "lib.rs"
LIMIT = 400
#: The rooms of the crate, as docs/architecture.md names them.
ROOMS = {"py", "scan", "read", "manifest", "restore", "sys", "failure", "entry_kind"}
_UNSAFE = re.compile(r"\bunsafe\b")


def files_naming_pyo3(lib: Path) -> list[str]:
    """Files outside ``py/`` whose code names PyO3 (an import, a ``#[py...]`` attribute, a ``Python<'py>`` token)."""
    src = lib.parent
    named = re.compile(r"\bpyo3\b|#\[py\w+|\bPython<|\bPyResult\b|\bBound<")
    return sorted(str(path.relative_to(src)) for path in crate_modules(lib).values()
                  if path.relative_to(src).parts[0] != "py" and named.search(code_of(path.read_text())))


def unsafe_outside_sys_or_unexplained(lib: Path) -> list[str]:
    """``file:line`` of every ``unsafe`` outside ``sys/``, and of every one in it not under a ``// SAFETY:`` line."""
    src = lib.parent
    found = []
    for path in crate_modules(lib).values():
        rel = path.relative_to(src)
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if not _UNSAFE.search(code_of(line)):
                continue
            above = lines[number - 1].strip() if number else ""
            if rel.parts[0] != "sys" or not above.startswith("// SAFETY:"):
                found.append(f"{rel}:{number + 1}")
    return sorted(found)


def oversized(lib: Path, limit: int = LIMIT) -> dict[str, int]:
    src = lib.parent
    return {str(p.relative_to(src)): n for p in src.rglob("*.rs") if (n := len(p.read_text().splitlines())) > limit}


def _crate(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path / "lib.rs"


def test_the_crate_has_no_module_cycle_and_its_rooms_use_each_other_one_way() -> None:
    graph = use_graph(LIB)
    assert len(graph) > 40, sorted(graph)
    assert cycles(graph) == []
    assert set(rooms(graph)) == ROOMS | {"crate"}
    assert cycles(rooms(graph)) == []
    assert rooms(graph)["py"] >= ROOMS - {"py"}, "py/ is the door: it uses every room"
    assert not any("py" in used for room, used in rooms(graph).items() if room != "py"), "no room calls up into py/"


def test_the_cycle_guard_sees_cycles_through_use_lines_paths_and_super(tmp_path: Path) -> None:
    lib = _crate(tmp_path, {
        "lib.rs": "mod failure;\nmod sys;\n",
        "failure.rs": "use crate::sys::calls::Errno; // a comment naming crate::sys::cancel is no edge\n",
        "sys/mod.rs": "//! the room\n\npub mod calls;\npub mod cancel;\n",
        "sys/calls.rs": 'pub type Errno = i32;\nfn f() -> bool { super::cancel::requested() }\n'
                        'const S: &str = "crate::failure";\n',
        "sys/cancel.rs": "use crate::{failure, sys::calls::Errno};\npub fn requested() -> bool { false }\n"
                         "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    })
    graph = use_graph(lib)
    assert graph["sys::calls"] == {"sys::cancel"}, "a comment or a string is no edge; super:: is"
    assert graph["sys::cancel"] == {"failure", "sys::calls"}, "a test module using its parent is no edge"
    assert cycles(graph) == [["failure", "sys::calls", "sys::cancel"]]
    assert cycles(rooms(graph)) == [["failure", "sys"]]


def test_the_cycle_guard_follows_path_attributes_and_child_modules(tmp_path: Path) -> None:
    lib = _crate(tmp_path, {
        "lib.rs": "mod read;\n",
        "read/mod.rs": "pub mod stage;\n",
        "read/stage.rs": "mod blobs;\n#[cfg(test)]\n#[path = \"stage_tests.rs\"]\nmod tests;\n"
                         "fn f() { blobs::check(); }\n",
        "read/stage/blobs.rs": "use super::g;\npub fn check() {}\n",
        "read/stage_tests.rs": "use super::*;\nuse crate::read::stage::blobs;\n",
    })
    graph = use_graph(lib)
    assert graph["read::stage::tests"] == {"read::stage", "read::stage::blobs"}
    assert cycles(graph) == [["read::stage", "read::stage::blobs"]]


def test_pyo3_is_named_only_under_py() -> None:
    assert any(path.parent.name == "py" for path in crate_modules(LIB).values()), "no py/: the guard is vacuous"
    assert files_naming_pyo3(LIB) == []


def test_the_pyo3_guard_sees_a_pyclass_outside_py(tmp_path: Path) -> None:
    lib = _crate(tmp_path, {
        "lib.rs": "mod py;\nmod scan;\nmod read;\n",
        "py/mod.rs": "use pyo3::prelude::*;\n",
        "scan/mod.rs": "// pyo3 named in a comment only\n",
        "read/mod.rs": "#[pyclass]\npub struct Kept;\n",
    })
    assert files_naming_pyo3(lib) == ["read/mod.rs"]


def test_unsafe_is_only_in_sys_each_under_its_safety_line() -> None:
    calls = (LIB.parent / "sys" / "calls.rs").read_text()
    assert len(_UNSAFE.findall(code_of(calls))) > 20, "found too few unsafe blocks: the guard would pass vacuously"
    assert unsafe_outside_sys_or_unexplained(LIB) == []


def test_the_unsafe_guard_sees_a_block_outside_sys_and_one_without_its_line(tmp_path: Path) -> None:
    lib = _crate(tmp_path, {
        "lib.rs": "mod read;\nmod sys;\n",
        "read/mod.rs": "// SAFETY: explained, but not in sys/\nfn f() { unsafe { g() } }\n",
        "sys/mod.rs": "// SAFETY: fine\nfn f() { unsafe { g() } }\n\nfn h() { unsafe { g() } }\n"
                      "// unsafe in a comment\n",
    })
    assert unsafe_outside_sys_or_unexplained(lib) == ["read/mod.rs:2", "sys/mod.rs:4"]


def test_no_rust_file_exceeds_400_lines() -> None:
    assert len(list(LIB.parent.rglob("*.rs"))) > 30
    assert oversized(LIB) == {}, "split these by responsibility"


def test_the_rust_size_guard_fails_on_a_401_line_file(tmp_path: Path) -> None:
    lib = _crate(tmp_path, {"lib.rs": "mod a;\n", "a.rs": "//\n" * (LIMIT + 1)})
    assert oversized(lib) == {"a.rs": LIMIT + 1}

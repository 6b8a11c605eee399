"""Issue 49: every ``OSError`` of the native core names the call that failed. Each ``Failure::os``/``os`` the core
builds gives a call's name first (a string, or ``call`` handed on by a helper); none is left empty but where no
call was made (a NUL byte refused before one) or where the failure is a bug of the core's own (a worker that
stopped). The guard is a function the test below also aims at a broken source."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native" / "src"
#: Where an empty call is right, and how often: NUL refusals (``c_path.rs``, ``create.rs``) and the core's bugs.
EMPTY_CALLS = {"sys/c_path.rs": 1, "restore/create.rs": 1, "sys/pool.rs": 2, "scan/second_thread.rs": 1,
               "scan/walk.rs": 2}
_BUILT = re.compile(r"(?<![\w:])(?:Failure::)?os\(\s*([^,)]*)")
_LITERAL = re.compile(r'(?:Failure::Os \{)((?:(?!\}\)).)*)', re.S)


def unnamed_calls(sources: dict[str, str]) -> list[str]:
    """Each place of ``sources`` (path -> Rust text) that builds an ``OSError`` failure without a call's name."""
    wrong, empty = [], Counter[str]()
    for path, text in sources.items():
        for found in _BUILT.finditer(text):
            first = found.group(1).strip()
            line = text.count("\n", 0, found.start()) + 1
            if text[max(0, found.start() - 3):found.start()] == "fn ":
                continue
            if first == '""':
                empty[path] += 1
            elif not (re.fullmatch(r'"[a-z_]+"', first) or first == "call"):
                wrong.append(f"{path}:{line}: {found.group(0)!r}")
        for found in _LITERAL.finditer(text):
            if "call" not in found.group(1).split(",")[0]:
                wrong.append(f"{path}:{text.count(chr(10), 0, found.start()) + 1}: Failure::Os without its call")
    wrong += [f"{path}: {count} empty calls, {EMPTY_CALLS.get(path, 0)} allowed" for path, count in empty.items()
              if count > EMPTY_CALLS.get(path, 0)]
    return wrong


def _core_sources() -> dict[str, str]:
    return {str(p.relative_to(NATIVE)): p.read_text() for p in sorted(NATIVE.rglob("*.rs"))
            if not p.name.endswith("_tests.rs")}


def test_every_oserror_the_core_builds_names_its_call() -> None:
    sources = _core_sources()
    assert sum(len(_BUILT.findall(text)) for text in sources.values()) > 40  # the guard sees the core's failures
    assert unnamed_calls(sources) == []


def test_the_guard_finds_a_failure_without_its_call() -> None:
    broken = {"read/stage.rs": 'let st = sys::fstat(fd).map_err(|e| Failure::os(e, None))?;\n'
                               'Err(e) => Err(os("", e, path)),\n'
                               'Failure::Os { errno, filename: None, filename2: None }\n'}
    found = unnamed_calls(broken)
    assert len(found) == 3, found
    assert unnamed_calls({"read/stage.rs": 'Failure::os("fstat", e, None); os(call, e, p);'
                                           ' Failure::Os { call: "rename", errno }'}) == []

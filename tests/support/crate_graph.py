"""The native crate's modules and what each uses, read from its source as a newcomer reads it: ``mod`` lines make
the tree (a file per module, a ``#[path]`` followed), and every path a module names — its ``use`` lines and the
``crate::``, ``super::``, ``self::`` or child-module paths in its code — is an edge to the module that path
reaches. A ``mod`` line is no edge: a room holds its modules, it does not depend on them. An inline module
(``#[cfg(test)] mod tests { ... }``) belongs to its file, and resolves ``super`` from where it sits."""

from __future__ import annotations

import re
from pathlib import Path

#: A module's ``#[path = "..."]`` (kept: it places the module's file), else comments, then string and char
#: literals: a brace or a path inside them is not code.
_NOISE = re.compile(r'(#\[path\s*=\s*"[^"]*"\])|//[^\n]*|/\*.*?\*/|r(#*)".*?"\2|b?"(?:\\.|[^"\\])*"'
                    r"|b?'(?:\\.|[^'\\])'", re.S)
_MOD = re.compile(r'(?:#\[path\s*=\s*"(?P<path>[^"]+)"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(?P<name>\w+)\s*'
                  r'(?P<end>[;{])')
_USE = re.compile(r"\buse\s+([^;]+);")
_PATH = re.compile(r"(?<![\w:])((?:\w+::)+\w+)(?![\w:])")


def code_of(text: str) -> str:
    """Rust source with its comments and literals blanked, a module's ``#[path]`` kept."""
    return _NOISE.sub(lambda m: m.group(1) or " ", text)


def _use_paths(tree: str, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths a use tree names: ``a::{b::{self, C}, d as e}`` -> ``a::b``, ``a::b::C``, ``a::d``."""
    tree = tree.strip()
    head, brace, rest = tree.partition("{")
    parts = tuple(p for p in head.strip().rstrip(":").split("::") if p) if brace else ()
    if not brace:
        leaf = tree.split(" as ")[0].strip()
        return [prefix] if leaf == "self" else [(*prefix, *leaf.split("::"))] if leaf and leaf != "*" else [prefix]
    inner = rest.rstrip().removesuffix("}")
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    return [path for item in items if item.strip() for path in _use_paths(item, (*prefix, *parts))]


def crate_modules(lib: Path) -> dict[tuple[str, ...], Path]:
    """Every file module of the crate whose root is ``lib``: its path (``("sys", "calls")``) -> its file."""
    found: dict[tuple[str, ...], Path] = {(): lib}
    todo = [((), lib)]
    while todo:
        module, path = todo.pop()
        # A module's own children sit in the folder named after it (lib.rs and mod.rs: the folder they are in).
        folder = path.parent if path.name in ("lib.rs", "mod.rs") else path.with_suffix("")
        for m in _MOD.finditer(code_of(path.read_text())):
            if m["end"] != ";":
                continue
            if m["path"]:
                child = path.parent / m["path"]
            else:
                child = folder / f"{m['name']}.rs"
                if not child.is_file():
                    child = folder / m["name"] / "mod.rs"
            if child.is_file():
                found[(*module, m["name"])] = child
                todo.append(((*module, m["name"]), child))
    return found


def _inline_scopes(code: str) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of every inline ``mod name { ... }`` in a file's code, by offset."""
    scopes = []
    for m in _MOD.finditer(code):
        if m["end"] != "{":
            continue
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        scopes.append((m.end(), i, m["name"]))
    return scopes


def _resolve(path: tuple[str, ...], here: tuple[str, ...], modules: dict[tuple[str, ...], Path],
             children: set[str]) -> tuple[str, ...] | None:
    """The file module a path starting in module ``here`` reaches (its longest prefix that is one), if in the crate."""
    if path[0] == "crate":
        at, rest = (), path[1:]
    elif path[0] in ("super", "self"):
        at, rest = here, path
        while rest and rest[0] in ("super", "self"):
            at, rest = (at[:-1] if rest[0] == "super" else at), rest[1:]
    elif path[0] in children:
        at, rest = here, path
    else:
        return None  # another crate's (std, pyo3, libc...), or a name brought in by a `use` already counted
    target = at
    for segment in rest:
        if (*target, segment) not in modules:
            break
        target = (*target, segment)
    while target not in modules:  # an inline module's path: its file's module
        target = target[:-1]
    return target


def use_graph(lib: Path) -> dict[str, set[str]]:
    """Module -> the crate's modules it uses (``sys::calls``; the root is ``crate``)."""
    modules = crate_modules(lib)
    name = {m: "::".join(m) or "crate" for m in modules}
    graph: dict[str, set[str]] = {name[m]: set() for m in modules}
    for module, path in modules.items():
        code = code_of(path.read_text())
        scopes = _inline_scopes(code)
        declared = {m["name"] for m in _MOD.finditer(code)}
        named: list[tuple[int, tuple[str, ...]]] = []
        for m in _USE.finditer(code):
            named += [(m.start(), p) for p in _use_paths(m.group(1)) if p]
        for m in _PATH.finditer(code):
            named.append((m.start(), tuple(m.group(1).split("::"))))
        for offset, used in named:
            here = module + tuple(n for start, end, n in scopes if start <= offset < end)
            children = {m[-1] for m in modules if m[:-1] == here and m} | (declared if here == module else set())
            target = _resolve(used, here, modules, children)
            if target is not None and target != module:
                graph[name[module]].add(name[target])
    return graph


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the crate's top-level modules (its rooms): a room uses another if any module of it does."""
    top = {m: m.split("::")[0] for m in graph}
    room_graph: dict[str, set[str]] = {r: set() for r in top.values()}
    for module, used in graph.items():
        room_graph[top[module]] |= {top[u] for u in used if top[u] != top[module] and top[u] != "crate"}
    return room_graph

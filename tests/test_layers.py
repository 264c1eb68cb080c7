"""The house's architecture, checked: layers that only point down, no import circles, rooms of a
readable size. Read from the source with ``ast`` (nothing is imported), every import counted,
those inside functions and ``TYPE_CHECKING`` blocks too: a circle through a lazy import is
still a circle in the design.

The layers, from the bottom (docs/architecture.md draws them):

- core: ``streamsaver.core`` (the I/O-free vocabulary), ``streamsaver.lua`` (the scripts) and
  the public event models (``streamsaver.events``, ``streamsaver.memory_events``);
- transport: ``streamsaver.transport``;
- services: the checkpointer, tailing, the audit trail, the Store, the projector, maintenance,
  ACL rules, the embedded server and the development server;
- presentation: the command line and the web console;
- the facade: ``streamsaver/__init__.py``, which only re-exports.

Within services the packages are ordered too (``SERVICES``): a package imports only those after it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "streamsaver"

# each top-level room of the package, to its layer (a higher number may import a lower one)
LAYERS: dict[str, int] = {
    "core": 0,
    "lua": 0,
    "events": 0,
    "memory_events": 0,
    "transport": 1,
    "maintenance": 2,
    "projector": 2,
    "store": 2,
    "checkpoint": 2,
    "audit": 2,
    "tailing": 2,
    "acl": 2,
    "devserver": 2,
    "embedded": 2,
    "cli": 3,
    "web": 3,
    "__main__": 3,
    "": 4,  # streamsaver/__init__.py
}
# the services, each importing only those after it
SERVICES = [
    "maintenance",
    "projector",
    "store",
    "checkpoint",
    "audit",
    "tailing",
    "acl",
    "devserver",
    "embedded",
]
# the most lines a module may have, unless its docstring says it reads best whole
MOST_LINES = 500
WHOLE = "reads best whole"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> Iterator[str]:
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    if target != ROOT and not target.startswith(ROOT + "."):
        return
    for alias in node.names:
        # ``from . import audit`` names a module; ``from .x import y`` a name in one
        sub = f"{target}.{alias.name}"
        yield sub if sub in MODULES else target


def imports(module: str) -> set[str]:
    """The streamsaver modules ``module`` imports, wherever in it the import stands."""
    path = MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, node, path.name == "__init__.py"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(ROOT + "."))
    return {m for m in found if m in MODULES and m != module}


GRAPH = {module: imports(module) for module in MODULES}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_room_has_a_layer() -> None:
    unplaced = sorted({room(m) for m in MODULES} - set(LAYERS))
    assert not unplaced, f"add these to LAYERS in tests/test_layers.py: {unplaced}"


def test_layers_only_point_down() -> None:
    wrong = [
        f"{m} (layer {LAYERS[room(m)]}) imports {t} (layer {LAYERS[room(t)]})"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if LAYERS[room(t)] > LAYERS[room(m)]
    ]
    assert not wrong, "\n".join(wrong)


def test_services_only_point_down() -> None:
    order = {name: i for i, name in enumerate(SERVICES)}
    wrong = [
        f"{m} imports {t}: {room(t)} comes before {room(m)} in SERVICES"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if room(m) in order and room(t) in order and order[room(t)] < order[room(m)]
    ]
    assert not wrong, "\n".join(wrong)


def _circles() -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert not _circles(), _circles()


def test_the_circle_finder_finds_one() -> None:
    """The check above can fail: a graph with a circle in it is reported."""
    saved = dict(GRAPH)
    try:
        GRAPH["streamsaver.core.errors"] = {"streamsaver.core.keys"}
        assert any("streamsaver.core.errors" in c for c in _circles())
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_modules_stay_readable() -> None:
    long = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if lines > MOST_LINES and WHOLE not in doc:
            long.append(f"{module}: {lines} lines")
    assert not long, (
        f"over {MOST_LINES} lines: split by concern, or say in the docstring why it {WHOLE}: {long}"
    )


def test_every_package_says_what_it_may_import() -> None:
    quiet = [
        m
        for m, path in MODULES.items()
        if path.name == "__init__.py"
        and m != ROOT
        and "may import" not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    ]
    assert not quiet, quiet

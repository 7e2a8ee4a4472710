"""The package's import graph is one-way (docs/architecture.md): no module imports one that imports it back, and
each layer, a folder, imports only its own folder and those below it: core, evidence, analysis, grading (sla), then
the rest. Function-level and type-only imports count: a cycle hidden inside a function is still a cycle."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "slabench"

# The layers, bottom up: a module imports only its own layer and the ones below (docs/architecture.md). A layer is a
# folder of the package; everything not listed (the Locust bridge, commands, simulator, planner, platform, ...) is
# the top layer and may import any layer below it.
LAYERS = ["slabench.core", "slabench.evidence", "slabench.analysis", "slabench.sla"]
TOP = len(LAYERS)


def layer(module: str) -> int:
    """The rank of the folder a module lives in (the package's own __init__ sits with the core)."""
    for rank, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 0 if module == "slabench" else TOP


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


MODULES = _module_names()


def _owner(name: str) -> str | None:
    """The slabench module a dotted import name lands in (a name inside a module belongs to that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> dict[str, tuple[int, str]]:
    """slabench modules `module` imports → (line, what Python imports: a module, or a package's __init__)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, tuple[int, str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule; `from pkg import name` the package's __init__
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            owner = _owner(target) if target.startswith("slabench") else None
            # a submodule's import of its own parent package is implied by Python's import system, not a design edge
            if owner and owner != module and not module.startswith(owner + "."):
                found.setdefault(owner, (node.lineno, target))
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def _edges(component: list[str]) -> list[str]:
    return [f"{m}:{line} imports {t}" for m in component for t, (line, _) in GRAPH[m].items() if t in component]


def test_no_module_imports_one_that_imports_it_back():
    assert [_edges(c) for c in _cycles()] == []


def _outside(module: str, allowed) -> list[str]:
    return [f"{module}:{line} imports {t}" for t, (line, _) in GRAPH[module].items() if not allowed(t)]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) < TOP))
def test_a_layer_imports_only_its_own_folder_and_those_below(module):
    assert _outside(module, lambda t: layer(t) <= layer(module)) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) < TOP))
def test_the_layers_below_the_bridge_never_import_locust(module):
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level]
    assert [n for n in names if n.split(".")[0] == "locust"] == []


def test_every_module_of_the_package_root_is_an_entry_point():
    """The root holds no layer's code: a new module goes into the folder of its layer."""
    assert sorted(m for m in MODULES if m.count(".") == 1 and MODULES[m].name != "__init__.py") == ["slabench.__main__"]

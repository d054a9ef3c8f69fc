"""The package's layers, read off its source: imports go only downward, and no
module imports itself back through others.

From the bottom: ``_compat`` (what differs between releases), ``codegen``
(conversion: wrapper IR to FX), ``artifact`` (the graph and what it needs to run
anywhere), ``runner`` (how a graph runs), ``integration`` (what Inductor and users
see; the package's ``__init__`` is its public face), and ``demo`` (fixtures).
Imports inside functions count as much as those at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "inductor_fx_unbacked"
LAYERS = ["_compat", "codegen", "artifact", "runner", "integration", "demo"]
#: Modules whose layer is not their folder's.
PLACED = {"__init__": "integration", "__main__": "demo"}
MAX_LINES = 420


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    top = module.split(".")[0]
    return LAYERS.index(PLACED.get(top, top))


def imported_modules(module: str, path: Path) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its source."""
    if module == "__init__":
        package = ""
    else:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").startswith("inductor_fx_unbacked"):
                prefix = node.module.removeprefix("inductor_fx_unbacked").lstrip(".")
            else:
                continue
            # ``from P import a``: the module P.a, or else an attribute of P.
            names = [f"{prefix}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        for name in names:
            name = name.removeprefix("inductor_fx_unbacked").lstrip(".")
            # The longest prefix that is a module of the package.
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


IMPORTS = {module: imported_modules(module, path) for module, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_only_downward(module):
    upward = sorted(
        imported for imported in IMPORTS[module] if imported and layer(imported) > layer(module)
    )
    assert not upward, f"{module} ({PLACED.get(module, module.split('.')[0])}) imports {upward}"


def test_no_import_circle():
    # Package __init__ modules are entered by every import of their children;
    # the edges that count are those between modules.
    edges = {m: {i for i in imports if i} for m, imports in IMPORTS.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for imported in sorted(edges.get(module, ())):
            if state.get(imported) == 1:
                circle = stack[stack.index(imported) :] + [imported]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if imported not in state:
                visit(imported)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines"


def test_every_module_has_a_layer():
    for module in MODULES:
        assert module.split(".")[0] in (*LAYERS, *PLACED), module

"""The code's shape, where the import contracts (pyproject.toml, `lint-imports`) cannot see it:
every module of hikyaku/ placed in the layers contract, no private names imported across
modules, no import cycles between files."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hikyaku", "tenants", "agents", "messaging", "webui", "hikyaku_client")


def layers_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["type"] == "layers")


def test_every_module_of_hikyaku_is_placed_in_the_layers_contract():
    placed = {
        name.strip()
        for layer in layers_contract()["layers"]
        for name in layer.replace("|", ":").split(":")
    }
    hikyaku = ROOT / "hikyaku"
    modules = {f"hikyaku.{path.stem}" for path in hikyaku.glob("*.py")}
    modules |= {f"hikyaku.{path.parent.name}" for path in hikyaku.glob("*/__init__.py")}
    modules -= {"hikyaku.__init__"}
    assert modules - placed == set(), "place these in pyproject.toml's layers contract"
    assert placed - modules - {"webui", "messaging", "agents", "tenants"} == set()


def private_imports(path: Path) -> list[str]:
    """Every `from x import _name` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    paths = [p for package in (*PACKAGES, "tests") for p in (ROOT / package).rglob("*.py")]
    assert [hit for path in paths for hit in private_imports(path)] == []


def import_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == module:
                        break
                if len(members) > 1:
                    cycles.append(frozenset(members))
    return cycles


def test_no_import_cycles_between_files():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert import_cycles(graph) == []

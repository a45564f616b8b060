"""The import graph of ``robopt/`` has no circle (DESIGN.md section 8).

Built from the source with ``ast``, every import counted: module level, inside functions, under
``TYPE_CHECKING``, and a string constant that names a robopt module (an import by string, e.g. for
``importlib.import_module``). ``from robopt.a import b`` is an edge to ``robopt.a.b`` when that is a module,
else to ``robopt.a``. The implicit import of a parent package is not counted (a package's ``__init__`` that
imports its own submodules would otherwise always close a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2] / "robopt"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _nearest_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_statements() -> list[tuple[str, int, str]]:
    """(module, line, robopt module it imports) for every import statement and import string in ``robopt/``."""
    modules = _modules()
    found: list[tuple[str, int, str]] = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
                targets = [node.value]  # an import by string
            for target in targets:
                if target == "robopt" or target.startswith("robopt."):
                    module = _nearest_module(target, modules)
                    if module is not None and module != name:
                        found.append((name, node.lineno, module))
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the robopt modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in _modules()}
    for name, _line, module in import_statements():
        graph[name].add(module)
    return graph


def find_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the number of modules (~150)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _describe(circle: list[str], graph: dict[str, set[str]]) -> str:
    members = set(circle)
    edges = [f"{module} -> {', '.join(sorted(graph[module] & members))}" for module in circle]
    return f"{len(circle)} modules: " + "; ".join(edges)


def test_robopt_import_graph_is_acyclic():
    graph = import_graph()
    circles = find_circles(graph)
    assert not circles, "import circles in robopt/:\n" + "\n".join(_describe(c, graph) for c in circles)


def test_the_check_finds_a_circle_and_counts_lazy_and_string_imports():
    # The detector itself, on a hand-made graph: a <-> b through a lazy import, c -> a only.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert find_circles(graph) == [["a", "b"]]
    assert find_circles({"a": {"b"}, "b": set()}) == []
    # The real graph sees imports by string (robopt.cli registers the sim2real commands by module name) and
    # inside functions (robopt.fleet.loop imports the Ray worker only when a fleet is built).
    real = import_graph()
    assert "robopt.sim2real.deploy" in real["robopt.cli"]
    assert "robopt.fleet.worker" in real["robopt.fleet.loop"]


def test_the_config_core_knows_no_feature():
    # robopt.config imports nothing from robopt but the leaf robopt.options: the features register into it.
    assert import_graph()["robopt.config"] == {"robopt.options"}
    assert import_graph()["robopt.options"] == set()

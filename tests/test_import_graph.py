"""The package's import graph, read with ast from src/: every import counts, at module level, inside functions
or under TYPE_CHECKING; `from x import y` imports x.y when y is a module, else x. A package's __init__ runs
before its modules, but that implicit edge does not count (it would put every module in a cycle with the
package root)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "tiledispatch"
CORE = ("configs", "kernels", "codegen", "problems", "arch")   # lower layers: no cycle may touch them


def module_names(src: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `src` by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:   # relative: resolve against this module's package
        parent = module.split(".")
        parent = parent[:len(parent) - node.level + (1 if is_package else 0)]
        base = ".".join(parent + ([base] if base else []))
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def import_graph(src: Path = SRC, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its source)."""
    known = module_names(src, package)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            edges.update(name for name in _imported(node, module, is_package, known) if name in known)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def _in(module: str, subpackage: str) -> bool:
    name = f"{PACKAGE}.{subpackage}"
    return module == name or module.startswith(name + ".")


def test_the_graph_sees_function_level_imports_and_submodules(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (pkg / "a.py").write_text("def f():\n    from pkg import sub\n")
    (pkg / "sub" / "b.py").write_text("from pkg import a\nfrom .c import x\n")
    (pkg / "sub" / "c.py").write_text("x = 1\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub"} and graph["pkg.sub.b"] == {"pkg.a", "pkg.sub.c"}
    assert cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.b"]]
    assert reachable(graph, "pkg.sub.c") == set()


def test_configs_import_nothing_from_kernels():
    graph = import_graph()
    for module in (m for m in graph if _in(m, "configs")):
        bad = sorted(m for m in reachable(graph, module) if _in(m, "kernels"))
        assert not bad, f"{module} imports {bad} (directly or through other modules)"


def test_no_cycle_touches_configs_kernels_codegen_problems_arch():
    core = [c for c in cycles(import_graph()) if any(_in(m, sub) for m in c for sub in CORE)]
    assert not core, core


def test_no_import_cycle_in_the_package():
    found = cycles(import_graph())
    assert not found, found

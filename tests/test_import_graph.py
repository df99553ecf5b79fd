"""No import cycle among chatkeep's modules: each imports only modules below it.

The source is read, not run. Every import of a chatkeep module is an edge, at module level
or inside a function; imports under ``if TYPE_CHECKING:`` serve annotations only and are
left out. A package is not an edge of its own submodules (importing ``chatkeep.a.b`` runs
``chatkeep/a/__init__.py`` first, which would make every package a cycle); ``from
chatkeep.a import X`` is an edge to the package when ``X`` is not a submodule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chatkeep

ROOT = Path(chatkeep.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(node: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The chatkeep modules ``node`` imports when it runs (``TYPE_CHECKING`` blocks skipped)."""
    if isinstance(node, ast.If) and _type_checking(node):
        nodes: list[ast.AST] = list(node.orelse)
    elif isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & modules
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parent = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join([*parent, base] if base else parent)
        return {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names} & modules
    else:
        nodes = list(ast.iter_child_nodes(node))
    return {name for child in nodes for name in _imported(child, package, modules)}


def import_graph() -> dict[str, set[str]]:
    """Each chatkeep module -> the chatkeep modules it imports at run time."""
    paths = {module_name(path): path for path in ROOT.rglob("*.py")}
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = _imported(tree, package, modules) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_of_chatkeep_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_the_scan_sees_imports_and_skips_annotation_only_ones() -> None:
    graph = import_graph()
    assert "chatkeep.history.plan" in graph["chatkeep.history.compressor"]
    assert "chatkeep.history.summarizers.base" in graph["chatkeep.history.summarizers"]
    # mask.py names ChatSession and PrivacyGuard only under TYPE_CHECKING.
    assert graph["chatkeep.memory.embedders.mask"] == {"chatkeep.privacy.detector",
                                                       "chatkeep.privacy.vault"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

"""Adapters drive the public history round and nothing below it (issue 31): no module
under ``integrations/`` imports a private name of ``chatkeep.history`` nor reaches a
private attribute of the compressor, and none keeps a retry limit of its own."""

from __future__ import annotations

import ast
from pathlib import Path

INTEGRATIONS = Path(__file__).resolve().parents[2] / "src" / "chatkeep" / "integrations"


def adapter_sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path)))
            for path in sorted(INTEGRATIONS.rglob("*.py"))]


def test_there_are_adapters_to_read() -> None:
    assert len(adapter_sources()) > 10


def test_no_adapter_imports_a_private_name_of_history() -> None:
    found = []
    for path, tree in adapter_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "chatkeep.history"):
                found += [f"{path.name}: {alias.name}" for alias in node.names
                          if alias.name.startswith("_")]
                if any(part.startswith("_") for part in (node.module or "").split(".")):
                    found.append(f"{path.name}: {node.module}")
    assert found == []


def test_no_adapter_reaches_into_the_compressor() -> None:
    found = []
    for path, tree in adapter_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else \
                    owner.id if isinstance(owner, ast.Name) else ""
                if "compressor" in name or "round" in name:
                    found.append(f"{path.name}:{node.lineno}: {name}.{node.attr}")
    assert found == []


def test_no_adapter_keeps_a_retry_limit_of_its_own() -> None:
    found = []
    for path, tree in adapter_sources():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            found += [f"{path.name}: {t.id}" for t in targets
                      if isinstance(t, ast.Name) and "ATTEMPT" in t.id]
    assert found == []

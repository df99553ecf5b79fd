"""The inspector shapes pages; its reads live in the store (``chatkeep.store.inspection_*``).

The source is read, not run: no module under ``chatkeep/inspect`` may import the store's
tables or build a query, so a schema change has one place to update.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chatkeep.inspect

INSPECT = Path(chatkeep.inspect.__file__).parent
#: What building a query over the tables takes.
QUERY_BUILDERS = {"select", "table", "column", "func", "text", "exists", "literal_column",
                  "and_", "or_", "tuple_", "insert", "update", "delete", "join"}


def sql_imports(path: Path) -> list[str]:
    """The imports of ``path`` that would let it write SQL of its own."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {alias.name for alias in node.names}
            if node.module == "chatkeep.store.schema":
                found += [f"{node.module}.{n}" for n in sorted(names)]
            elif node.module == "chatkeep.store" and "schema" in names:
                found.append("chatkeep.store.schema")
            elif node.module.split(".")[0] == "sqlalchemy":
                found += [f"{node.module}.{n}" for n in sorted(names & QUERY_BUILDERS)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "chatkeep.store.schema"]
    return found


def test_no_inspector_module_builds_sql() -> None:
    modules = sorted(INSPECT.rglob("*.py"))
    assert len(modules) > 5
    offenders = {str(p.relative_to(INSPECT)): sql_imports(p) for p in modules}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_check_sees_a_query() -> None:
    assert sql_imports(Path(__file__)) == []
    sample = INSPECT.parent / "store" / "inspection_usage.py"
    assert "sqlalchemy.select" in sql_imports(sample)
    assert "chatkeep.store.schema.chat_usage" in sql_imports(sample)

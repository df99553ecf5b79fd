"""The full-text index on ``memories.content``: SQLite FTS5 or a PostgreSQL GIN index.

``metadata.create_all`` runs ``create_memory_text_index`` after it creates the
``memories`` table (a DDL event registered in ``schema.py``). Alembic migrations
call the same function with ``op.get_bind()``, so the index is defined once.
Every statement is idempotent (``IF NOT EXISTS``). The PostgreSQL index is also
declared on the table (PostgreSQL-only) so Alembic autogenerate does not propose
dropping it; that declaration and ``_PG_CREATE`` must stay the same expression.

SQLite keeps an external-content FTS5 table in step with triggers, so writers
never touch it; PostgreSQL indexes the expression ``to_tsvector(<config>, content)``
that recall queries with the same ``<config>``, which is what lets it use the index.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

FTS_TABLE = "memories_fts"
"""SQLite: the FTS5 table whose rowid is ``memories.id``."""
PG_TEXT_CONFIG = "english"
"""PostgreSQL text-search configuration of the index (queries must use the same one)."""
PG_INDEX = "ix_memories_content_fts"

_SQLITE_CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "content, content='memories', content_rowid='id', tokenize='porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ai AFTER INSERT ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ad AFTER DELETE ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_au AFTER UPDATE OF content ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    f"INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END",
)
_SQLITE_DROP = (
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ai",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ad",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_au",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
)
_PG_CREATE = (
    f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON memories "
    f"USING GIN (to_tsvector('{PG_TEXT_CONFIG}', content))",
)
_PG_DROP = (f"DROP INDEX IF EXISTS {PG_INDEX}",)


def memory_text_index_ddl(dialect: str) -> tuple[str, ...]:
    """The statements that create the index on ``dialect`` (empty where unsupported)."""
    return {"sqlite": _SQLITE_CREATE, "postgresql": _PG_CREATE}.get(dialect, ())


def create_memory_text_index(target: Any, connection: Connection, **_: Any) -> None:
    """Create the text index for ``memories`` (signature of an ``after_create`` event;
    from a migration: ``create_memory_text_index(None, op.get_bind())``)."""
    for statement in memory_text_index_ddl(connection.dialect.name):
        connection.exec_driver_sql(statement)


def drop_memory_text_index(target: Any, connection: Connection, **_: Any) -> None:
    """Drop what ``create_memory_text_index`` made (a ``before_drop`` event)."""
    drops = {"sqlite": _SQLITE_DROP, "postgresql": _PG_DROP}.get(connection.dialect.name, ())
    for statement in drops:
        connection.exec_driver_sql(statement)

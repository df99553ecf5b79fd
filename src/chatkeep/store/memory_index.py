"""The indexes beside ``memories``: full text (SQLite FTS5 or a PostgreSQL GIN index) and
the vector side table ``memory_vectors`` (see the end of this module).

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


# -- vectors -----------------------------------------------------------------------------
#
# One row per embedded memory, ``memory_id`` its primary key (deleted with the memory):
# the model that made the vector, its dimension and the vector. A side table, created
# by these DDL hooks like the FTS5 table, because on PostgreSQL its column type exists
# only where the pgvector extension does, and a deployment without it must still run
# (full-text recall). SQLite keeps vectors as float32 blobs (numpy ranks them exactly
# over the candidate scope); PostgreSQL as pgvector ``vector`` values, with one HNSW
# cosine index per dimension in use (``vector_index_ddl``, created when the first
# vector of that dimension is written). Every pgvector name is qualified by the schema
# the extension lives in, so it works whatever the connection's ``search_path``.

VECTOR_TABLE = "memory_vectors"
"""The side table: ``memory_id``, ``model``, ``dim``, ``embedding``."""
PG_EXTENSION = "vector"
"""The PostgreSQL extension (pgvector) the vector table needs."""

_SQLITE_VECTOR_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {VECTOR_TABLE} ("
    "memory_id INTEGER NOT NULL PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE, "
    "model VARCHAR(255) NOT NULL, dim INTEGER NOT NULL, embedding BLOB NOT NULL)",
    # Covers the scope fingerprint a cached search checks first, so it never reads the
    # vector rows themselves (1.5 KB each).
    f"CREATE INDEX IF NOT EXISTS {VECTOR_TABLE}_model ON {VECTOR_TABLE} "
    "(memory_id, model, dim)",
    # Foreign keys are on in chatkeep's engines; the trigger covers any other connection.
    f"CREATE TRIGGER IF NOT EXISTS {VECTOR_TABLE}_ad AFTER DELETE ON memories BEGIN "
    f"DELETE FROM {VECTOR_TABLE} WHERE memory_id = old.id; END",
)
_SQLITE_VECTOR_DROP = (f"DROP TRIGGER IF EXISTS {VECTOR_TABLE}_ad",
                       f"DROP INDEX IF EXISTS {VECTOR_TABLE}_model",
                       f"DROP TABLE IF EXISTS {VECTOR_TABLE}")


def pg_extension_schema(connection: Connection) -> str | None:
    """The schema pgvector is installed in on this database (``None``: not installed)."""
    value = connection.exec_driver_sql(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        f"WHERE e.extname = '{PG_EXTENSION}'").scalar()
    return None if value is None else str(value)


def pg_extension_available(connection: Connection) -> bool:
    """Whether the server has pgvector's files (``CREATE EXTENSION vector`` can work)."""
    return bool(connection.exec_driver_sql(
        "SELECT count(*) FROM pg_available_extensions "
        f"WHERE name = '{PG_EXTENSION}'").scalar())


def vector_table_exists(connection: Connection) -> bool:
    """Whether ``memory_vectors`` is there (in the connection's first schema on PostgreSQL)."""
    if connection.dialect.name == "postgresql":
        return connection.exec_driver_sql(
            f"SELECT to_regclass('{VECTOR_TABLE}') IS NOT NULL").scalar() is True
    return connection.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
        f"AND name = '{VECTOR_TABLE}'").scalar() == 1


def _pg_create_extension(connection: Connection) -> str | None:
    """Install pgvector if the server has it (in ``public``, where every schema can reach
    it by its qualified name); the schema it is in, or ``None`` when it cannot be had."""
    schema = pg_extension_schema(connection)
    if schema is not None or not pg_extension_available(connection):
        return schema
    try:
        with connection.begin_nested():  # a refusal (privileges) must not end the transaction
            connection.exec_driver_sql(
                f"CREATE EXTENSION IF NOT EXISTS {PG_EXTENSION} WITH SCHEMA public")
    except Exception:
        return None
    return pg_extension_schema(connection)


def create_memory_vector_table(target: Any, connection: Connection, **_: Any) -> bool:
    """Create ``memory_vectors`` (an ``after_create`` event, and migration 0006). On
    PostgreSQL only where pgvector is available (installing the extension if needed);
    returns whether the table exists afterwards."""
    dialect = connection.dialect.name
    if dialect == "sqlite":
        for statement in _SQLITE_VECTOR_CREATE:
            connection.exec_driver_sql(statement)
        return True
    if dialect != "postgresql":
        return False
    schema = _pg_create_extension(connection)
    if schema is None:
        return False
    connection.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {VECTOR_TABLE} ("
        "memory_id BIGINT NOT NULL PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE, "
        f"model VARCHAR(255) NOT NULL, dim INTEGER NOT NULL, "
        f'embedding "{schema}".vector NOT NULL)')
    return True


def drop_memory_vector_table(target: Any, connection: Connection, **_: Any) -> None:
    """Drop ``memory_vectors`` and its indexes (a ``before_drop`` event; the extension stays,
    other databases' objects may use it)."""
    if connection.dialect.name == "sqlite":
        for statement in _SQLITE_VECTOR_DROP:
            connection.exec_driver_sql(statement)
    elif connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"DROP TABLE IF EXISTS {VECTOR_TABLE}")


def vector_index_name(dim: int) -> str:
    """The PostgreSQL HNSW index serving vectors of dimension ``dim``."""
    return f"ix_{VECTOR_TABLE}_hnsw_{int(dim)}"


def vector_index_ddl(schema: str, dim: int) -> str:
    """The HNSW cosine index for one dimension: an expression index (a ``vector`` column of
    no fixed dimension cannot be indexed itself), partial on that dimension."""
    dim = int(dim)
    return (f"CREATE INDEX IF NOT EXISTS {vector_index_name(dim)} ON {VECTOR_TABLE} "
            f'USING hnsw ((embedding::"{schema}".vector({dim})) "{schema}".vector_cosine_ops) '
            f"WHERE dim = {dim}")

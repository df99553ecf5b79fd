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
    # Foreign keys are on in chatkeep's engines; the trigger covers any other connection.
    f"CREATE TRIGGER IF NOT EXISTS {VECTOR_TABLE}_ad AFTER DELETE ON memories BEGIN "
    f"DELETE FROM {VECTOR_TABLE} WHERE memory_id = old.id; END",
)
_SQLITE_VECTOR_DROP = (f"DROP TRIGGER IF EXISTS {VECTOR_TABLE}_ad",
                       f"DROP INDEX IF EXISTS {VECTOR_TABLE}_model",  # before 0007
                       f"DROP TABLE IF EXISTS {VECTOR_TABLE}")

# SQLite vector search keeps each scope's decoded vectors in a per-process cache; what
# tells it the cache is still exact is one row per tenant here, a stamp that triggers
# replace on every write that could change which vectors the tenant's scopes hold: a
# memory inserted, updated (superseded, moved; not a recall stamp or an expiry, which
# change no vector) or deleted (forgotten, erased), a vector
# inserted, replaced (re-embedded, another model) or deleted. Triggers, so writes from
# any connection or process count, and checking the cache is one primary-key lookup.
# The stamp is random, not a counter: a rolled-back write, a restored backup or another
# database file can bring a counter back to a value a cache saw with other contents, but
# cannot repeat a 64-bit random stamp. No row = no write since the table was made: never
# cached. (PostgreSQL keeps no such cache: pgvector ranks in the database.)

GENERATION_TABLE = "memory_generations"
"""SQLite: ``tenant_type``, ``tenant_id``, ``generation`` (a random stamp per tenant)."""
RECALL_COLUMNS = ("expires_at", "ttl_seconds", "last_recalled_at")
"""Columns whose updates leave the cache exact (migration 0014): recall stamps its time,
a refresh moves an expiry, and expiry is checked on the rows recall fetches, not cached."""
CACHED_COLUMNS = ("id", "tenant_type", "tenant_id", "tenant_id_int", "subject_type", "subject_id",
                  "subject_id_int", "actor_type", "actor_id", "actor_id_int", "scope",
                  "scope_key", "content", "content_key", "source_session_id",
                  "source_through_seq", "created_at", "updated_at", "superseded_by", "pii")
"""Every other column of ``memories`` (a test holds the two lists to the table): an update
of any of them stamps the tenant."""


def _bump(rows: str) -> str:
    """A new stamp for each tenant ``rows`` yields (a ``VALUES`` list or a ``SELECT``)."""
    return (f"INSERT INTO {GENERATION_TABLE} (tenant_type, tenant_id, generation) {rows} "
            "ON CONFLICT (tenant_type, tenant_id) DO UPDATE SET generation = random();")


def _of_memories(ids: str) -> str:
    return f"SELECT tenant_type, tenant_id, random() FROM memories WHERE id IN ({ids})"


_SQLITE_GENERATION_TRIGGERS = {
    "mi": ("AFTER INSERT ON memories",
           _bump("VALUES (new.tenant_type, new.tenant_id, random())")),
    "mu": (f"AFTER UPDATE OF {', '.join(CACHED_COLUMNS)} ON memories",
           _bump("VALUES (old.tenant_type, old.tenant_id, random()), "
                 "(new.tenant_type, new.tenant_id, random())")),
    "md": ("AFTER DELETE ON memories",
           _bump("VALUES (old.tenant_type, old.tenant_id, random())")),
    # A vector's tenant is its memory's (gone when the memory's deletion cascades here,
    # which "md" has stamped already).
    "vi": (f"AFTER INSERT ON {VECTOR_TABLE}", _bump(_of_memories("new.memory_id"))),
    "vu": (f"AFTER UPDATE ON {VECTOR_TABLE}",
           _bump(_of_memories("old.memory_id, new.memory_id"))),
    "vd": (f"AFTER DELETE ON {VECTOR_TABLE}", _bump(_of_memories("old.memory_id"))),
}
_SQLITE_GENERATION_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {GENERATION_TABLE} ("
    "tenant_type VARCHAR(64) NOT NULL, tenant_id VARCHAR(255) NOT NULL, "
    "generation INTEGER NOT NULL, PRIMARY KEY (tenant_type, tenant_id)) WITHOUT ROWID",
    *(f"CREATE TRIGGER IF NOT EXISTS {GENERATION_TABLE}_{name} {when} BEGIN {body} END"
      for name, (when, body) in _SQLITE_GENERATION_TRIGGERS.items()),
    # Every tenant with memories gets a new stamp: (re)making the tables may have changed
    # what its scopes hold without a trigger seeing it.
    _bump("SELECT tenant_type, tenant_id, random() FROM memories WHERE true "
          "GROUP BY tenant_type, tenant_id").rstrip(";"),
)
_SQLITE_GENERATION_DROP = (
    *(f"DROP TRIGGER IF EXISTS {GENERATION_TABLE}_{name}"
      for name in _SQLITE_GENERATION_TRIGGERS),
    f"DROP TABLE IF EXISTS {GENERATION_TABLE}",
)


def recreate_update_trigger(connection: Connection, *, recall_columns: bool) -> None:
    """SQLite: make the generation trigger on updates of ``memories`` again, firing on
    updates of :data:`CACHED_COLUMNS` (``recall_columns``: migration 0014's form) or of
    any column (the form before it). Nothing where the stamps do not exist."""
    if connection.dialect.name != "sqlite" or not generations_exist(connection):
        return
    when, body = _SQLITE_GENERATION_TRIGGERS["mu"]
    if not recall_columns:
        when = "AFTER UPDATE ON memories"
    connection.exec_driver_sql(f"DROP TRIGGER IF EXISTS {GENERATION_TABLE}_mu")
    connection.exec_driver_sql(
        f"CREATE TRIGGER {GENERATION_TABLE}_mu {when} BEGIN {body} END")


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
    """Create ``memory_vectors`` (an ``after_create`` event, and migration 0006), on SQLite
    with ``memory_generations``. On PostgreSQL only where pgvector is available (installing
    the extension if needed); returns whether the table exists afterwards."""
    dialect = connection.dialect.name
    if dialect == "sqlite":
        for statement in _SQLITE_VECTOR_CREATE:
            connection.exec_driver_sql(statement)
        create_memory_generations(target, connection)
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
        drop_memory_generations(target, connection)
        for statement in _SQLITE_VECTOR_DROP:
            connection.exec_driver_sql(statement)
    elif connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"DROP TABLE IF EXISTS {VECTOR_TABLE}")


def create_memory_generations(target: Any, connection: Connection, **_: Any) -> None:
    """SQLite: the per-tenant stamps and their triggers (with the vector table, and
    migration 0007 for databases made before it); nothing elsewhere."""
    if connection.dialect.name == "sqlite":
        for statement in _SQLITE_GENERATION_CREATE:
            connection.exec_driver_sql(statement)


def drop_memory_generations(target: Any, connection: Connection, **_: Any) -> None:
    """Drop what ``create_memory_generations`` made."""
    if connection.dialect.name == "sqlite":
        for statement in _SQLITE_GENERATION_DROP:
            connection.exec_driver_sql(statement)


def generations_exist(connection: Connection) -> bool:
    """Whether ``memory_generations`` is there (SQLite; a database not yet migrated to 0007
    when chatkeep runs with ``create_schema=False`` has none)."""
    return connection.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
        f"AND name = '{GENERATION_TABLE}'").scalar() == 1


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

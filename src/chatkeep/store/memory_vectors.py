"""The memories' vectors: their codec, their table and index, and writing them.

Vectors (``memory_vectors``, one per memory, with the model that made it) are written in
the same transaction as their memory when the caller computed them beforehand
(``memory_writes``); a live memory without a vector of the configured model is what
``memories embed`` fills in (``missing_vectors``, ``store_vectors``). On PostgreSQL the
table needs pgvector, and one HNSW index per dimension, created once per process under an
advisory lock.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, and_, column, func, select, table, text
from sqlalchemy.types import UserDefinedType

from chatkeep.errors import StoreError
from chatkeep.refs import Ref
from chatkeep.store.connections import ensure_started, reading, transaction
from chatkeep.store.memory_index import (
    PG_EXTENSION,
    VECTOR_TABLE,
    create_memory_vector_table,
    pg_extension_available,
    pg_extension_schema,
    vector_index_ddl,
    vector_table_exists,
)
from chatkeep.store.memory_rows import MemoryRow, Vector, VectorStatus, memory_row, tenant_is
from chatkeep.store.schema import memories

vectors_table = table(VECTOR_TABLE, column("memory_id"), column("model"), column("dim"),
                      column("embedding"))
"""``memory_vectors`` as the queries see it (its type differs per dialect)."""
VECTOR_LOCK_KEY = 0x636B_7663  # "ckvc": chatkeep vector DDL


class PgVector(UserDefinedType[Any]):
    """pgvector's ``vector(dim)``, qualified by the extension's schema; binds a sequence of
    floats as pgvector's text form."""

    cache_ok = True

    def __init__(self, schema: str, dim: int) -> None:
        self.schema = schema
        self.dim = dim

    def get_col_spec(self, **_: Any) -> str:
        """The type as DDL and casts spell it."""
        return f'"{self.schema}".vector({self.dim})'

    def bind_processor(self, dialect: Any) -> Callable[[Any], Any]:
        """Floats in, pgvector's text form out."""
        def process(value: Any) -> Any:
            return None if value is None else vector_text(value)
        return process


def vector_text(vector: Vector) -> str:
    """pgvector's text form of ``vector``: ``[0.1,0.2,...]``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def normalised(vector: Vector) -> list[float]:
    """``vector`` scaled to length 1 (so cosine similarity is a dot product); a zero or
    non-finite vector is refused."""
    values = [float(x) for x in vector]
    norm = math.sqrt(sum(x * x for x in values))
    if not values or not math.isfinite(norm) or norm == 0.0:
        raise StoreError("cannot store an empty, zero or non-finite embedding")
    return [x / norm for x in values]


def vector_blob(vector: Vector) -> bytes:
    """SQLite's compact form: little-endian float32, 4 bytes per dimension."""
    return struct.pack(f"<{len(vector)}f", *vector)


class MemoryVectors:
    """The vector table of one engine: made ready once, indexed per dimension, written
    (thread-safe; recall and writes share one)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._vector_schema: str | None = None
        self._indexed_dims: set[int] = set()
        self._ddl_lock = threading.Lock()

    def vectors_available(self) -> bool:
        """Whether this database has the vector table (on PostgreSQL: pgvector is there)."""
        with reading(self.engine) as conn:
            return vector_table_exists(conn)

    def ensure_vectors(self) -> None:
        """Make sure vectors can be stored: create the side table if an older migration
        ran before pgvector was installed; ``StoreError`` naming the missing PostgreSQL
        extension when it cannot be had."""
        ensure_started(self.engine)  # before the lock: starting runs this very check
        with self._ddl_lock:
            if self._vector_schema is not None:
                return
            with transaction(self.engine) as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": VECTOR_LOCK_KEY})
                if not vector_table_exists(conn) and not create_memory_vector_table(None, conn):
                    available = pg_extension_available(conn)
                    raise StoreError(
                        f'memory.embedding_model is set but the PostgreSQL extension '
                        f'"{PG_EXTENSION}" (pgvector) is '
                        + ("available on the server and could not be created here: run "
                           f'CREATE EXTENSION {PG_EXTENSION}; as a privileged user'
                           if available else
                           "not installed on this server: install pgvector 0.8 or newer "
                           "(e.g. the postgresql-NN-pgvector package)")
                        + ", or unset memory.embedding_model for full-text recall")
                schema = pg_extension_schema(conn) if conn.dialect.name == "postgresql" else ""
            self._vector_schema = schema or ""

    def schema(self) -> str:
        """The schema pgvector lives in (``""`` on SQLite), made ready on first use."""
        if self._vector_schema is None:
            self.ensure_vectors()
        assert self._vector_schema is not None
        return self._vector_schema

    def ensure_vector_index(self, dim: int) -> None:
        """PostgreSQL: the HNSW cosine index for vectors of ``dim`` dimensions (once per
        process and dimension; concurrent creators wait on an advisory lock)."""
        if self.engine.dialect.name != "postgresql" or dim in self._indexed_dims:
            return
        schema = self.schema()
        with self._ddl_lock, transaction(self.engine) as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": VECTOR_LOCK_KEY})
            conn.exec_driver_sql(vector_index_ddl(schema, dim))
            self._indexed_dims.add(dim)

    def put_vectors(self, conn: Connection, model: str,
                    items: Sequence[tuple[int, Vector]]) -> None:
        """Write (or replace) ``items``' vectors in ``conn``'s transaction, unit length."""
        rows = []
        for memory_id, vector in items:
            unit = normalised(vector)
            value: Any = vector_blob(unit) if conn.dialect.name == "sqlite" else unit
            rows.append({"memory_id": memory_id, "model": model, "dim": len(unit),
                         "embedding": value})
        if not rows:
            return
        if conn.dialect.name == "sqlite":
            conn.execute(text(
                f"INSERT INTO {VECTOR_TABLE} (memory_id, model, dim, embedding) "
                "VALUES (:memory_id, :model, :dim, :embedding) ON CONFLICT (memory_id) DO "
                "UPDATE SET model = excluded.model, dim = excluded.dim, "
                "embedding = excluded.embedding"), rows)
            return
        schema = self.schema()
        for row in rows:
            row["embedding"] = vector_text(row["embedding"])
        conn.execute(text(
            f"INSERT INTO {VECTOR_TABLE} (memory_id, model, dim, embedding) "
            f'VALUES (:memory_id, :model, :dim, CAST(:embedding AS "{schema}".vector)) '
            "ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model, "
            "dim = excluded.dim, embedding = excluded.embedding"), rows)

    def store_vectors(self, model: str, items: Sequence[tuple[int, Vector]]) -> int:
        """Write (or replace) the vectors of memories still present; returns how many."""
        if not items:
            return 0
        self.schema()
        for dim in {len(v) for _, v in items}:
            self.ensure_vector_index(dim)
        with transaction(self.engine) as conn:
            present = {int(r[0]) for r in conn.execute(select(memories.c.id).where(
                memories.c.id.in_([i for i, _ in items])))}
            kept = [(i, v) for i, v in items if i in present]  # erased meanwhile: skip
            self.put_vectors(conn, model, kept)
        return len(kept)

    def _missing(self, model: str) -> Any:
        has = select(vectors_table.c.memory_id).where(
            vectors_table.c.memory_id == memories.c.id, vectors_table.c.model == model)
        return and_(memories.c.superseded_by.is_(None), ~has.exists())

    def missing_vectors(self, model: str, after_id: int, limit: int) -> list[MemoryRow]:
        """Live memories with no vector of ``model`` (never embedded, a failed embedding
        call, or another model's), in id order after ``after_id``: what ``memories
        embed`` walks, in pages, so an interrupted run resumes where it stopped."""
        self.schema()
        query = (select(memories).where(memories.c.id > after_id, self._missing(model))
                 .order_by(memories.c.id).limit(limit))
        with reading(self.engine) as conn:
            return [memory_row(r) for r in conn.execute(query)]

    def vector_status(self, model: str, tenant: Ref | None = None) -> VectorStatus:
        """Live memories with and without a vector of ``model`` (one tenant or all)."""
        self.schema()
        live = select(func.count()).select_from(memories).where(
            memories.c.superseded_by.is_(None))
        missing = select(func.count()).select_from(memories).where(self._missing(model))
        if tenant is not None:
            live, missing = live.where(tenant_is(tenant)), missing.where(tenant_is(tenant))
        with reading(self.engine) as conn:
            total = int(conn.execute(live).scalar_one())
            lacking = int(conn.execute(missing).scalar_one())
        return VectorStatus(model, total - lacking, lacking)

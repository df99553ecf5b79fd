"""The memory store's reads: text and vector recall, lookups, listings, counts.

Vector search filters by tenant, scope and liveness in the same statement that ranks, so
it never ranks (or returns) another scope's memory: on SQLite an exact cosine over the
scope's vectors (``memory_ranking``), decoded once and reused while the tenant's
generation stamp (``memory_generations``, kept by triggers) is unchanged; on PostgreSQL
pgvector's cosine distance, served by the HNSW index with iterative scans (the index keeps
walking until enough rows pass the filter) or by the scope index and an exact sort,
whichever the planner prices lower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    cast,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.sql.expression import ColumnClause

from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.memory_index import (
    FTS_TABLE,
    GENERATION_TABLE,
    PG_TEXT_CONFIG,
    generations_exist,
)
from chatkeep.store.memory_ranking import _SCOPE_CACHE, rank_exact, scope_matrix
from chatkeep.store.memory_rows import (
    BY_IDS,
    MemoryRow,
    Vector,
    live_in,
    memory_row,
    tenant_is,
    unexpired,
)
from chatkeep.store.memory_vectors import MemoryVectors, PgVector, normalised, vectors_table
from chatkeep.store.rows import utcnow
from chatkeep.store.schema import memories

_fts = table(FTS_TABLE, column("rowid"), column(FTS_TABLE))
_vectors = vectors_table
# Built once: recall runs them on every query, and building a statement costs more than
# SQLite takes to answer it.
_GENERATION = text(f"SELECT generation FROM {GENERATION_TABLE} "
                   "WHERE tenant_type = :type AND tenant_id = :id")
# SET LOCAL of both in one round trip.
_PG_SCAN = text("SELECT set_config('hnsw.iterative_scan', 'strict_order', true), "
                "set_config('hnsw.ef_search', :ef_search, true)")


class MemoryRecall:
    """Reads over the memories (thread-safe): what recall, review and dedupe ask."""

    def __init__(self, engine: Engine, vectors: MemoryVectors,
                 now: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.vectors = vectors
        self.now = now
        """The store's time: what has expired is read against it."""
        self._generations = False  # SQLite: memory_generations seen (migration 0007)
        self._pg_statements: dict[tuple[str, int, bool], Select[Any]] = {}

    def search(self, tenant: Ref, scope_keys: Sequence[str], terms: Sequence[str],
               limit: int) -> list[MemoryRow]:
        """Live memories in ``scope_keys`` matching any of ``terms``, best first, newest
        first among equals (served by the FTS5 table / the GIN expression index)."""
        if not terms or not scope_keys or limit <= 0:
            return []
        query, score_label = self._text_query(terms)
        query = query.where(live_in(tenant, scope_keys), unexpired(self.now())).order_by(
            literal_column(score_label).desc(), memories.c.updated_at.desc(),
            memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            if conn.dialect.name not in ("sqlite", "postgresql"):
                raise NotImplementedError(f"no text search for {conn.dialect.name}")
            return [memory_row(r, float(r._mapping[score_label])) for r in conn.execute(query)]

    def _text_query(self, terms: Sequence[str]) -> tuple[Select[Any], str]:
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            match = " OR ".join(f'"{t}"' for t in terms)  # terms are \w+: no quotes inside
            score = (-func.bm25(literal_column(FTS_TABLE))).label("score")
            query = (select(memories, score).select_from(
                _fts.join(memories, memories.c.id == _fts.c.rowid))
                .where(_fts.c[FTS_TABLE].op("MATCH")(match)))
            return query, "score"
        config: ColumnClause[Any] = literal_column(f"'{PG_TEXT_CONFIG}'")
        vector = func.to_tsvector(config, memories.c.content)
        tsquery = func.websearch_to_tsquery(config, " or ".join(terms))
        query = select(memories, func.ts_rank(vector, tsquery).label("score")).where(
            vector.op("@@")(tsquery))
        return query, "score"

    def recent(self, tenant: Ref, scope_keys: Sequence[str], limit: int,
               exclude: Sequence[int] = ()) -> list[MemoryRow]:
        """Live memories in ``scope_keys``, most recently written first."""
        if not scope_keys or limit <= 0:
            return []
        query = select(memories).where(live_in(tenant, scope_keys), unexpired(self.now()))
        if exclude:
            query = query.where(memories.c.id.not_in(list(exclude)))
        query = query.order_by(memories.c.updated_at.desc(), memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            return [memory_row(r) for r in conn.execute(query)]

    def find_live(self, tenant: Ref, scope_key: str, content_key: str) -> MemoryRow | None:
        """The live memory with this normalised text in this scope, if any."""
        query = select(memories).where(live_in(tenant, [scope_key]),
                                       memories.c.content_key == content_key)
        with reading(self.engine) as conn:
            row = conn.execute(query).first()
        return memory_row(row) if row is not None else None

    def find_known(self, tenant: Ref, scope_key: str, content_key: str, session_id: str,
                   after_seq: int) -> MemoryRow | None:
        """A memory that already holds this text in this scope: a live one, or one taken
        from this very session past ``after_seq`` and superseded since (re-distilling a
        range must not bring back a fact that was later replaced)."""
        from_here = and_(memories.c.source_session_id == session_id,
                         memories.c.source_through_seq > after_seq)
        query = (select(memories)
                 .where(tenant_is(tenant), memories.c.scope_key == scope_key,
                        memories.c.content_key == content_key,
                        or_(memories.c.superseded_by.is_(None), from_here))
                 .order_by(memories.c.superseded_by.is_(None).desc()).limit(1))
        with reading(self.engine) as conn:
            row = conn.execute(query).first()
        return memory_row(row) if row is not None else None

    def get_memory(self, tenant: Ref, memory_id: int) -> MemoryRow | None:
        """The memory ``memory_id`` of ``tenant``, live or superseded (``None``: there is
        none of that tenant: another tenant's id is not found)."""
        query = select(memories).where(tenant_is(tenant), memories.c.id == memory_id)
        with reading(self.engine) as conn:
            row = conn.execute(query).first()
        return memory_row(row) if row is not None else None

    def list_memories(self, tenant: Ref, *, scope: str | None = None, actor: Ref | None = None,
             subject: Ref | None = None, include_superseded: bool = False,
             include_expired: bool = True, limit: int = 100) -> list[MemoryRow]:
        """A tenant's memories for review (``chatkeep memories list``), newest first
        (those expired and awaiting the sweep too, unless ``include_expired`` is off)."""
        query = select(memories).where(tenant_is(tenant))
        if scope is not None:
            query = query.where(memories.c.scope == scope)
        if actor is not None:
            query = query.where(memories.c.actor_type == actor.type,
                                memories.c.actor_id == actor.id_text)
        if subject is not None:
            query = query.where(memories.c.subject_type == subject.type,
                                memories.c.subject_id == subject.id_text)
        if not include_superseded:
            query = query.where(memories.c.superseded_by.is_(None))
        if not include_expired:
            query = query.where(unexpired(self.now()))
        query = query.order_by(memories.c.updated_at.desc(), memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            return [memory_row(r) for r in conn.execute(query)]

    def count(self, tenant: Ref | None = None, *, live_only: bool = False) -> int:
        """Number of memory rows (all tenants when ``tenant`` is ``None``)."""
        query = select(func.count()).select_from(memories)
        if tenant is not None:
            query = query.where(tenant_is(tenant))
        if live_only:
            query = query.where(memories.c.superseded_by.is_(None))
        with reading(self.engine) as conn:
            return int(conn.execute(query).scalar_one())

    # -- vectors -------------------------------------------------------------------------

    def vector_search(self, tenant: Ref, scope_keys: Sequence[str], vector: Vector,
                      model: str, limit: int) -> list[MemoryRow]:
        """The live memories of ``scope_keys`` nearest to ``vector`` by cosine (``score``:
        the similarity), among those embedded by ``model`` with the same dimension.
        Tenant, scope and liveness filter the candidates before anything is ranked."""
        if not scope_keys or limit <= 0 or not vector:
            return []
        unit = normalised(vector)
        if self.engine.dialect.name == "postgresql":
            return self._pg_vector_search(tenant, scope_keys, unit, model, limit)
        return self._sqlite_vector_search(tenant, scope_keys, unit, model, limit)

    def _pg_vector_search(self, tenant: Ref, scope_keys: Sequence[str], unit: list[float],
                          model: str, limit: int) -> list[MemoryRow]:
        schema, dim = self.vectors.schema(), len(unit)
        values = {"tenant_type": tenant.type, "tenant_id": tenant.id_text,
                  "scope_keys": list(scope_keys), "model": model, "query_vector": unit,
                  "limit": limit, "now": self.now()}
        with reading(self.engine, block=True) as conn:  # set_config(local) needs a transaction
            # If the planner walks the HNSW index, walk on until `limit` rows pass the
            # scope filter (pgvector >= 0.8), in exact distance order.
            conn.execute(_PG_SCAN, {"ef_search": str(max(40, min(limit, 1000)))})
            rows = conn.execute(self._pg_nearest(schema, dim, exact=False), values).all()
            if len(rows) < limit:
                # An approximate index can miss in-scope vectors (an in-scope memory far
                # from a crowd of another tenant's): fewer than asked means the scope may
                # hold more, so rank it exactly.
                rows = conn.execute(self._pg_nearest(schema, dim, exact=True), values).all()
            return [memory_row(r, 1.0 - float(r._mapping["distance"])) for r in rows]

    def _pg_nearest(self, schema: str, dim: int, *, exact: bool) -> Select[Any]:
        """The scope's nearest vectors of one dimension, tenant, scopes, model, query vector
        and limit bound as parameters: built once, not on every recall."""
        key = (schema, dim, exact)
        statement = self._pg_statements.get(key)
        if statement is None:
            kind = PgVector(schema, dim)
            distance = cast(_vectors.c.embedding, kind).op(f'OPERATOR("{schema}".<=>)')(
                bindparam("query_vector", type_=kind))
            statement = (
                select(memories, distance.label("distance"))
                .select_from(memories.join(_vectors, _vectors.c.memory_id == memories.c.id))
                .where(memories.c.tenant_type == bindparam("tenant_type"),
                       memories.c.tenant_id == bindparam("tenant_id"),
                       memories.c.scope_key.in_(bindparam("scope_keys", expanding=True)),
                       memories.c.superseded_by.is_(None),
                       or_(memories.c.expires_at.is_(None),
                           memories.c.expires_at > bindparam("now")),
                       _vectors.c.model == bindparam("model"),
                       # The dimension as a literal: the HNSW index is partial on it.
                       _vectors.c.dim == literal_column(str(int(dim))))
                # Exact: ordering by an expression keeps the index out.
                .order_by(distance.op("+")(literal_column("0")) if exact else distance)
                .limit(bindparam("limit")))
            self._pg_statements[key] = statement
        return statement

    def _sqlite_vector_search(self, tenant: Ref, scope_keys: Sequence[str],
                              unit: list[float], model: str,
                              limit: int) -> list[MemoryRow]:
        dim = len(unit)
        key = (id(self.engine), tenant.type, tenant.id_text, tuple(sorted(scope_keys)), model,
               dim)
        with reading(self.engine) as conn:
            # The tenant's stamp first, in the snapshot everything after it reads: a cached
            # matrix is reused only while no write has touched the tenant since it was read.
            stamp = self._generation(conn, tenant)
            cached = _SCOPE_CACHE.get(key) if stamp is not None else None
            if cached is None or cached[0] != stamp:
                scope = and_(live_in(tenant, scope_keys), _vectors.c.model == model,
                             _vectors.c.dim == dim)
                found = conn.execute(
                    select(_vectors.c.memory_id, _vectors.c.embedding)
                    .select_from(memories.join(_vectors, _vectors.c.memory_id == memories.c.id))
                    .where(scope)).all()
                cached = (stamp, *scope_matrix([int(r[0]) for r in found],
                                               [r[1] for r in found], dim))
                if stamp is not None:
                    _SCOPE_CACHE.put(key, cached, sum(len(r[1]) for r in found))
            if not cached[1]:
                return []
            return self._unexpired_nearest(conn, cached[1], cached[2], unit, limit)

    def _unexpired_nearest(self, conn: Connection, ids: Any, matrix: Any, unit: list[float],
                           limit: int) -> list[MemoryRow]:
        """The ``limit`` nearest of the cached scope that have not expired: the cache
        holds the scope's vectors whatever their expiry (time passing changes nothing a
        trigger sees), so expiry is checked on the rows fetched, ranking further when an
        expired one awaiting the sweep took a place."""
        now, want = self.now(), limit
        while True:
            ranked = rank_exact(ids, matrix, unit, want)
            rows = conn.execute(BY_IDS, {"ids": [i for i, _ in ranked]}).all()
            by_id = {int(r._mapping["id"]): r for r in rows}
            found = [m for m in (memory_row(by_id[i], score) for i, score in ranked
                                 if i in by_id) if not m.expired(now)]
            if len(found) >= limit or len(ranked) < want:
                return found[:limit]
            want += limit

    def _generation(self, conn: Connection, tenant: Ref) -> int | None:
        """The tenant's stamp (``None``: no write since the stamps began, or a database not
        yet migrated to 0007: not cached)."""
        if not self._generations:
            self._generations = generations_exist(conn)
            if not self._generations:
                return None
        value = conn.execute(_GENERATION, {"type": tenant.type, "id": tenant.id_text}).scalar()
        return None if value is None else int(value)

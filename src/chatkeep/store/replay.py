"""The replay's SQL: record a built request's manifest, read back what rebuilds it.

A manifest is written with the texts it names (each once per session: ``INSERT`` that
leaves an existing row alone) and the call's quota reservation, all or nothing: on SQLite
in one short transaction, on PostgreSQL in one statement (one round trip). Its turn is
the session's next (``MAX(turn) + 1`` in the insert itself; on PostgreSQL two writers of
one session that meet on the key try again). The reads take only what one past request
needs: its summary version, the messages of its seq range as they stood then (a message
stored or retracted after the request was not in it), the texts and memory rows it
names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Engine,
    Integer,
    String,
    Text,
    bindparam,
    func,
    insert,
    or_,
    select,
    text,
)
from sqlalchemy.sql.elements import TextClause

from chatkeep.errors import SessionNotFound, StoreError
from chatkeep.messages import Message
from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.executor import Transport
from chatkeep.store.lazy import dialect_insert
from chatkeep.store.quotas import PG_RESERVE_BINDS, PG_RESERVE_CTES, PG_RESERVED, Boarding
from chatkeep.store.rows import (
    SessionRow,
    as_utc,
    message_from_row,
    session_from_row,
    split_at,
)
from chatkeep.store.schema import (
    SYSTEM_ROLE,
    chat_messages,
    chat_replay_manifests,
    chat_replay_texts,
    chat_summary_versions,
    memories,
    ref_filter,
    ref_values,
)
from chatkeep.store.statements import MESSAGE_COLUMNS, SESSION_BY_ID

__all__ = ["ManifestRow", "PastMemory", "PastState", "read_manifest", "read_past",
           "record_manifest", "turns"]

_M = chat_replay_manifests.c
_NEXT_TURN = select(func.coalesce(func.max(_M.turn), 0) + 1).where(
    _M.session_id == bindparam("b_session_id")).scalar_subquery()
_ATTEMPTS = 64
"""Turns a manifest may lose to other writers of its session (each loss is another
writer's turn taken, so this bounds how many write one session at once)."""


@dataclass(frozen=True, slots=True)
class ManifestRow:
    """One turn's row: its number, the newest seq it read, when, and its manifest
    (``None``: the requests built before the database had replay)."""

    turn: int
    last_seq: int
    created_at: datetime
    manifest: str | None


@dataclass(frozen=True, slots=True)
class PastMemory:
    """A recalled memory's row as it is now (its text never changes)."""

    id: int
    content: str
    sealed_pii: str | None


@dataclass(frozen=True, slots=True)
class PastState:
    """What the store still holds of one past request's inputs."""

    row: SessionRow
    """The session's row now (its vault: the replay takes its first entries)."""
    summary: str | None
    """The summary at the request's version (``None``: none, or erased)."""
    summary_found: bool
    pinned: list[Message]
    messages: list[Message]
    texts: dict[str, str]
    memories: dict[int, PastMemory]


@functools.cache
def _sqlite_statements() -> tuple[Any, Any]:
    """SQLite's texts insert (a row already there is left alone) and manifest insert
    taking the session's next turn: built once each (a driver compiles a statement
    object once)."""
    return (
        dialect_insert("sqlite", chat_replay_texts).on_conflict_do_nothing(),
        insert(chat_replay_manifests).from_select(
            ["session_id", "tenant_type", "tenant_id", "tenant_id_int", "turn",
             "last_seq", "created_at", "manifest"],
            select(bindparam("b_session_id", type_=String()),
                   bindparam("b_tenant_type", type_=String()),
                   bindparam("b_tenant_id", type_=String()),
                   bindparam("b_tenant_id_int", type_=Boolean()), _NEXT_TURN,
                   bindparam("b_last_seq", type_=Integer()),
                   bindparam("b_now", type_=chat_replay_manifests.c.created_at.type),
                   bindparam("b_manifest", type_=Text()))).returning(_M.turn))


def _pg_record_statement(reserving: bool) -> TextClause:
    """PostgreSQL's whole :func:`record_manifest` as one statement: its commit unsynced
    (``set_config`` local to the statement's own transaction), the texts (a row already
    there left alone) and the manifest taking the session's next turn, and with
    ``reserving`` the reservation's CTEs (:data:`~chatkeep.store.quotas.PG_RESERVE_CTES`),
    the texts and the manifest then written only if it fits. Returns the turn (and with
    ``reserving``, the quota rows first: a row of NULLs when none applies)."""
    ok = "(SELECT fits FROM verdict) IS NOT FALSE" if reserving else "true"
    statement = text(f"""
WITH {PG_RESERVE_CTES + ',' if reserving else ''}
s AS (SELECT set_config('synchronous_commit', 'off', true) AS off),
go AS (SELECT {ok} AS ok),
t AS (INSERT INTO chat_replay_texts (session_id, tenant_type, tenant_id, tenant_id_int,
                                     digest, body)
  SELECT :b_m_session_id, :b_m_tenant_type, :b_m_tenant_id, :b_m_tenant_id_int, x.d, x.b
  FROM go, unnest(CAST(:b_m_digests AS TEXT[]), CAST(:b_m_bodies AS TEXT[])) AS x(d, b)
  WHERE go.ok ON CONFLICT DO NOTHING),
m AS (INSERT INTO chat_replay_manifests (session_id, tenant_type, tenant_id, tenant_id_int,
                                         turn, last_seq, created_at, manifest)
  SELECT :b_m_session_id, :b_m_tenant_type, :b_m_tenant_id, :b_m_tenant_id_int,
         COALESCE((SELECT max(turn) FROM chat_replay_manifests
                   WHERE session_id = :b_m_session_id), 0) + 1,
         :b_m_last_seq, :b_m_now, :b_m_manifest
  FROM go WHERE go.ok RETURNING turn)
SELECT {PG_RESERVED + ',' if reserving else ''} (SELECT turn FROM m), (SELECT off FROM s)
{'FROM (SELECT 1) AS one LEFT JOIN locked ON true' if reserving else ''}""")
    typed = [bindparam("b_m_now", type_=_M.created_at.type),
             bindparam("b_m_tenant_id_int", type_=Boolean()),
             bindparam("b_m_last_seq", type_=Integer())]
    return statement.bindparams(*typed, *(PG_RESERVE_BINDS if reserving else ()))


PG_RECORD = _pg_record_statement(False)
PG_RECORD_RESERVING = _pg_record_statement(True)


def record_manifest(transport: Transport, session_id: str, tenant: Ref, last_seq: int,
                    manifest: str, texts: Mapping[str, str], now: datetime, *,
                    reservation: Boarding | None = None) -> int:
    """Store a request's manifest as the session's next turn, with the texts it names
    (kept once per session) and the call's quota ``reservation`` (its locks then held the
    shortest), all or nothing; returns the turn. A refused reservation
    (``QuotaExceeded``) writes none of them. The commit does not wait for the disk:
    written before the call leaves, visible to every process and durable against a crash
    of this one at once, and durable against power loss with the next synced commit (in
    a turn, the answer's). On PostgreSQL all of it is one statement in autocommit (one
    round trip: :func:`_pg_record`); on SQLite one transaction (``synced=False``)."""
    owner = {"session_id": session_id, **ref_values("tenant", tenant)}
    params = {**{f"b_{name}": value for name, value in owner.items()},
              "b_last_seq": last_seq, "b_now": now, "b_manifest": manifest}
    attempt = 0
    while True:
        try:
            if transport.dialect == "postgresql":
                return _pg_record(transport, params, texts, reservation)
            with transport.transaction(synced=False) as ex:
                put_texts, put_manifest = _sqlite_statements()
                if texts:
                    ex.many(put_texts, [{**owner, "digest": digest, "body": body}
                                        for digest, body in texts.items()])
                turn = int(ex.rows(put_manifest, params)[0][0])
                if reservation is not None:
                    reservation.write(ex)
                return turn
        except transport.integrity_errors as exc:  # another writer took the turn first
            attempt += 1
            if attempt == _ATTEMPTS:
                raise StoreError(f"session {session_id}: the request's manifest could not "
                                 f"take a turn number in {_ATTEMPTS} attempts") from exc


def _pg_record(transport: Transport, params: Mapping[str, Any], texts: Mapping[str, str],
               reservation: Boarding | None) -> int:
    """PostgreSQL's :func:`record_manifest`: one statement, its own transaction."""
    values = {f"b_m_{name[2:]}": value for name, value in params.items()}
    values.update(b_m_digests=list(texts), b_m_bodies=list(texts.values()))
    with transport.autocommit() as ex:
        if reservation is None:
            return int(ex.rows(PG_RECORD, values)[0][0])
        reservation.before(ex)
        held, reserving = reservation.pg_params()
        rows = ex.rows(PG_RECORD_RESERVING, {**values, **reserving})
    reservation.pg_verdict(rows, held)  # QuotaExceeded: the statement wrote nothing
    return int(rows[0][6])


def read_manifest(engine: Engine, session_id: str, turn: int) -> ManifestRow | None:
    """Turn ``turn`` of the session (``turn < 0`` counts from the newest: -1 is the
    last), or ``None`` when it has no such turn."""
    query = select(_M.turn, _M.last_seq, _M.created_at, _M.manifest).where(
        _M.session_id == session_id)
    if turn > 0:
        query = query.where(_M.turn == turn)
    else:
        query = query.order_by(_M.turn.desc()).offset(-turn - 1).limit(1)
    with reading(engine) as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    return ManifestRow(int(row[0]), int(row[1]), as_utc(row[2]) or row[2], row[3])


def turns(engine: Engine, session_id: str, *, after: int = 0, limit: int = 100,
          newest: bool = False) -> list[ManifestRow]:
    """The session's turns after turn ``after``, oldest first, at most ``limit`` (the
    newest ``limit`` with ``newest``)."""
    query = (select(_M.turn, _M.last_seq, _M.created_at, _M.manifest)
             .where(_M.session_id == session_id, _M.turn > after)
             .order_by(_M.turn.desc() if newest else _M.turn).limit(limit))
    with reading(engine) as conn:
        rows = [ManifestRow(int(r[0]), int(r[1]), as_utc(r[2]) or r[2], r[3])
                for r in conn.execute(query)]
    return rows[::-1] if newest else rows


def read_past(engine: Engine, session_id: str, tenant: Ref, *, summary_version: int, watermark: int,
              last_seq: int, at: datetime, digests: Sequence[str],
              memory_ids: Sequence[int]) -> PastState:
    """What rebuilds one past request, on one connection: the session's row, the summary
    of version
    ``summary_version`` (the newest version at or below it: a retraction moves the
    version, not the text), the session's system messages at or below ``watermark`` and
    its messages in ``watermark+1..last_seq`` as they stood at ``at``, the texts
    ``digests`` name and the memory rows of ``tenant`` ``memory_ids`` name (what is gone
    is missing)."""
    m, v = chat_messages.c, chat_summary_versions.c
    as_then = [m.created_at <= at, or_(m.retracted_at.is_(None), m.retracted_at > at)]
    # Two index ranges, as build_history reads: the pinned system messages (the partial
    # index) and the range after the watermark; an OR of the two would walk the session.
    below = select(*MESSAGE_COLUMNS).where(
        m.session_id == session_id, text(SYSTEM_ROLE), m.seq <= min(watermark, last_seq),
        *as_then)
    tail = select(*MESSAGE_COLUMNS).where(
        m.session_id == session_id, m.seq > watermark, m.seq <= last_seq, *as_then)
    with reading(engine) as conn:
        found_row = conn.execute(SESSION_BY_ID, {"b_session_id": session_id}).first()
        if found_row is None:
            raise SessionNotFound(f"no session {session_id!r}")
        summary, found = None, watermark == 0
        if watermark > 0:
            row = conn.execute(select(v.summary, v.watermark).where(
                v.session_id == session_id, v.version <= summary_version)
                .order_by(v.version.desc()).limit(1)).first()
            if row is not None and int(row[1]) == watermark:
                summary, found = row[0], True
        raws = [*conn.execute(below.order_by(m.seq)).all(),
                *conn.execute(tail.order_by(m.seq)).all()]
        texts = {r[0]: r[1] for r in conn.execute(
            select(chat_replay_texts.c.digest, chat_replay_texts.c.body).where(
                chat_replay_texts.c.session_id == session_id,
                chat_replay_texts.c.digest.in_(list(digests))))} if digests else {}
        rows = conn.execute(select(memories.c.id, memories.c.content, memories.c.pii)
                            .where(memories.c.id.in_(list(memory_ids)),
                                   ref_filter(memories, "tenant", tenant))).all() \
            if memory_ids else []
    pinned, after = split_at([message_from_row(r) for r in raws], watermark)
    return PastState(session_from_row(found_row), summary, found, pinned, after, texts,
                     {int(r[0]): PastMemory(int(r[0]), r[1], r[2]) for r in rows})

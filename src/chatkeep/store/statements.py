"""The statements of the hot path, built once.

Built once, at import or (a statement only PostgreSQL runs) on first use
(:mod:`chatkeep.store.lazy`): a call then pays for parameter binding only (building a
statement per call cost more than SQLite's own work). The repository and its procedures
(:mod:`chatkeep.store.procedures`) run these objects through SQLAlchemy, or the driver
executor (:mod:`chatkeep.store.direct`) compiles them for the driver itself, so no
statement exists twice.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Integer,
    Select,
    String,
    Text,
    bindparam,
    column,
    func,
    insert,
    literal_column,
    select,
    true,
    union_all,
    update,
)

from chatkeep.store.lazy import LazyStatements, dialect_insert
from chatkeep.store.rows import MESSAGE_FIELDS
from chatkeep.store.schema import (
    INDEXED_MARK,
    MARK_EXPRESSIONS,
    TS,
    chat_folds,
    chat_messages,
    chat_sessions,
    chat_summary_versions,
    chat_tool_calls,
    chat_usage,
)

_M = chat_messages.c
_S = chat_sessions.c

MESSAGE_COLUMNS = [chat_messages.c[name] for name in MESSAGE_FIELDS]
LIVE = _M.retracted_at.is_(None)

# -- the reads every turn makes ----------------------------------------------------------

SESSION_BY_ID = select(chat_sessions).where(_S.id == bindparam("b_session_id"))
TENANT_SESSION_BY_ID = SESSION_BY_ID.where(_S.tenant_type == bindparam("b_tenant_type"),
                                          _S.tenant_id == bindparam("b_tenant_id"))
"""A session by id, only if ``b_tenant_type`` / ``b_tenant_id`` own it."""
_AFTER_WATERMARK = select(*MESSAGE_COLUMNS).where(
    _M.session_id == bindparam("b_session_id"), _M.seq > bindparam("b_watermark"), LIVE)
ALL_LIVE = _AFTER_WATERMARK.order_by(_M.seq)
"""A session never summarized: every live message."""
UNSUMMARIZED = union_all(
    select(*MESSAGE_COLUMNS).where(
        _M.session_id == bindparam("b_session_id"), _M.role == "system",
        _M.seq <= bindparam("b_watermark"), LIVE),
    _AFTER_WATERMARK).order_by("seq")
"""Pinned system messages at or below the watermark, then every live message after it."""


def _message_read(live: bool, through: bool, limited: bool) -> Select[Any]:
    query = select(*MESSAGE_COLUMNS).where(_M.session_id == bindparam("b_session_id"),
                                           _M.seq > bindparam("b_after"))
    if live:
        query = query.where(LIVE)
    if through:
        query = query.where(_M.seq <= bindparam("b_through"))
    query = query.order_by(_M.seq)
    return query.limit(bindparam("b_limit", type_=Integer)) if limited else query


MESSAGE_READS = {(live, through, limited): _message_read(live, through, limited)
                 for live in (False, True) for through in (False, True)
                 for limited in (False, True)}
"""``Repository.read_messages``' statement for each ``(live_only, through_seq given,
limit given)``: built once, so the driver transport compiles each once (a query built
per call would go through SQLAlchemy Core every time, several times the database's own
work for a short read)."""

# -- writes ------------------------------------------------------------------------------

INSERT_SESSION = insert(chat_sessions).returning(chat_sessions)
SESSION_BY_KEY = select(chat_sessions).where(
    _S.tenant_type == bindparam("b_tenant_type"), _S.tenant_id == bindparam("b_tenant_id"),
    _S.key == bindparam("b_key"))
_KEY_COLUMNS = ["tenant_type", "tenant_id", "key"]
INSERT_KEYED_SESSION = LazyStatements(
    ("sqlite", "postgresql"),
    lambda dialect: dialect_insert(dialect, chat_sessions).on_conflict_do_nothing(
        index_elements=_KEY_COLUMNS).returning(chat_sessions))
"""Per dialect: insert a keyed session unless the tenant already has that key (then no
row comes back, and the winner of the race is read by :data:`SESSION_BY_KEY`). Built on
first use (:mod:`chatkeep.store.lazy`: PostgreSQL's construct imports its dialect)."""
CLAIM_SEQ = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"), _S.closed_at.is_(None))
    .values(last_seq=_S.last_seq + bindparam("b_count", type_=Integer()),
            last_message_at=bindparam("b_now", type_=TS),
            total_tokens=_S.total_tokens + bindparam("b_billed", type_=BigInteger()))
    .returning(chat_sessions)
)
"""Take the next ``b_count`` seq values (the row lock orders concurrent appenders)."""
SET_SUMMARY = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.summary_version == bindparam("b_expected", type_=Integer()),
           _S.summary_watermark < bindparam("b_watermark", type_=Integer()))
    .values(summary=bindparam("b_summary"),
            summary_watermark=bindparam("b_watermark", type_=Integer()),
            summary_version=bindparam("b_expected", type_=Integer()) + 1,
            fold_lease_until=None, fold_failures=0, fold_retry_at=None)
    .returning(chat_sessions)
)
"""A fold's compare-and-set: the new summary and watermark, unless another fold won."""
CLAIM_FOLD = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.summary_version == bindparam("b_expected", type_=Integer()),
           (_S.fold_lease_until.is_(None)) | (_S.fold_lease_until < bindparam("b_now", type_=TS)),
           (_S.fold_retry_at.is_(None)) | (_S.fold_retry_at <= bindparam("b_now", type_=TS)))
    .values(fold_lease_until=bindparam("b_until", type_=TS))
    .returning(_S.id)
)
"""Claim the next fold of a summary version, unless a live lease or a back-off holds it."""
RELEASE_FOLD = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.fold_lease_until == bindparam("b_until", type_=TS))
    .values(fold_lease_until=None)
)
"""Give a claim back (the fold lost a race): only our own lease, never a later claimant's."""
RENEW_FOLD = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.fold_lease_until == bindparam("b_until", type_=TS))
    .values(fold_lease_until=bindparam("b_new_until", type_=TS))
    .returning(_S.id)
)
"""Extend our own claim while its fold runs (between summarizer calls); none once lost."""
FAIL_FOLD = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.fold_lease_until == bindparam("b_until", type_=TS))
    .values(fold_lease_until=None, fold_failures=_S.fold_failures + 1,
            fold_retry_at=bindparam("b_retry_at", type_=TS))
)
"""Give a claim back after a failed fold, and back off until ``b_retry_at``."""
LOCK_METADATA = (update(chat_sessions).where(_S.id == bindparam("b_session_id"))
                 .values(metadata=_S.metadata).returning(_S.metadata))
"""Take the session row's lock (a no-op write) and read its metadata as of that lock."""
SET_METADATA = (update(chat_sessions).where(_S.id == bindparam("b_session_id"))
                .values(metadata=bindparam("b_metadata", type_=_S.metadata.type))
                .returning(chat_sessions))
"""Write the session's metadata; the row after it."""
INSERT_FOLD = insert(chat_folds)
INSERT_SUMMARY_VERSION = insert(chat_summary_versions)
INSERT_MESSAGE = insert(chat_messages)
INSERT_TOOL_CALL = insert(chat_tool_calls)
INSERT_USAGE = insert(chat_usage)
ANSWER_CALL = (
    update(chat_tool_calls)
    .where(chat_tool_calls.c.session_id == bindparam("b_session_id"),
           chat_tool_calls.c.call_id == bindparam("b_call_id"),
           chat_tool_calls.c.call_seq < bindparam("b_seq", type_=Integer()),
           chat_tool_calls.c.result_seq.is_(None))
    .values(result_seq=bindparam("b_seq", type_=Integer()))
    .returning(chat_tool_calls.c.call_id)
)
CALL_FOUND = select(chat_tool_calls.c.call_seq, chat_tool_calls.c.result_seq).where(
    chat_tool_calls.c.session_id == bindparam("b_session_id"),
    chat_tool_calls.c.call_id == bindparam("b_call_id"))
"""Asked only after a refused answer: no such earlier call, or answered already?"""
SESSION_EXISTS = select(_S.id).where(_S.id == bindparam("b_session_id"))
"""Asked only after a refused claim: missing, or closed?"""
CALLS_TAKEN = select(chat_tool_calls.c.call_id).where(
    chat_tool_calls.c.session_id == bindparam("b_session_id"),
    chat_tool_calls.c.call_id.in_(bindparam("b_call_ids", expanding=True)))
"""Which of ``b_call_ids`` the session's tool calls already use (its unique index)."""


def mark_value(dialect: str, key: str) -> Any:
    """A message's metadata value under ``key`` as text: for the indexed key, the
    index's own expression (``MARK_EXPRESSIONS``: a lookup by id probes the index), else
    SQLAlchemy's JSON path."""
    expression = MARK_EXPRESSIONS.get(dialect)
    if key == INDEXED_MARK and expression is not None:
        return literal_column(expression, String)
    return _M.metadata[key].as_string()


@functools.cache
def marks_held(dialect: str, key: str) -> Select[Any]:
    """Which of ``b_marks`` the session's messages carry under metadata ``key`` (an id
    an integration records messages by), retracted ones included. Every seq is asked,
    whatever the caller believes it checked: for the indexed key it is a probe per id."""
    mark = mark_value(dialect, key)
    return select(mark).where(_M.session_id == bindparam("b_session_id"),
                              mark.in_(bindparam("b_marks", expanding=True)))


@functools.cache
def marks_after(key: str) -> Select[Any]:
    """The values under metadata ``key`` of a session's messages after ``b_after`` (an
    index range, only that value read), built once per key."""
    return select(_M.metadata[key].as_string()).where(
        _M.session_id == bindparam("b_session_id"), _M.seq > bindparam("b_after"))


@functools.cache
def marks_elsewhere(key: str) -> Select[Any]:
    """Which of ``b_marks`` the messages of *other* sessions named ``b_key`` carry under
    metadata ``key``: the same key in another tenant (a session's key is unique per
    tenant). Cost: the sessions named ``b_key`` (no index on the key alone), then their
    messages."""
    mark = _M.metadata[key].as_string()
    return (select(mark).select_from(chat_messages.join(chat_sessions,
                                                        _S.id == _M.session_id))
            .where(_S.key == bindparam("b_key"), _S.id != bindparam("b_session_id"),
                   mark.in_(bindparam("b_marks", expanding=True))))


# -- PostgreSQL's one-statement append ---------------------------------------------------

def _pg_append(with_usage: bool) -> Select[Any]:
    """``CLAIM_SEQ`` as a CTE, the messages (and usage rows) inserted from JSON recordsets
    beside it, the session row returned. Only a claimed (open, existing) session inserts
    anything."""
    claimed = CLAIM_SEQ.cte("claimed")
    m = func.json_to_recordset(bindparam("b_rows", type_=JSON())).table_valued(
        column("k", Integer), column("role", String), column("content", Text),
        column("tool_call_id", String), column("name", String), column("tokens", Integer),
        column("metadata", JSON), column("native", JSON)).render_derived("m", with_types=True)
    first = claimed.c.last_seq - bindparam("b_count", type_=Integer())
    added = insert(chat_messages).from_select(
        ["session_id", "seq", "role", "content", "tool_call_id", "name", "tokens",
         "created_at", "metadata", "native"],
        select(claimed.c.id, first + m.c.k, m.c.role, m.c.content, m.c.tool_call_id,
               m.c.name, m.c.tokens, bindparam("b_now", type_=TS), m.c.metadata,
               m.c.native).select_from(claimed.join(m, true()))).cte("added")
    statement = select(claimed).add_cte(added)
    if with_usage:
        u = func.json_to_recordset(bindparam("b_usages", type_=JSON())).table_valued(
            column("purpose", String), column("model", String),
            column("prompt_tokens", Integer), column("completion_tokens", Integer),
        ).render_derived("u", with_types=True)
        billed = insert(chat_usage).from_select(
            ["session_id", "tenant_type", "tenant_id", "tenant_id_int", "purpose", "model",
             "prompt_tokens", "completion_tokens", "created_at"],
            select(claimed.c.id, claimed.c.tenant_type, claimed.c.tenant_id,
                   claimed.c.tenant_id_int, u.c.purpose, u.c.model, u.c.prompt_tokens,
                   u.c.completion_tokens, bindparam("b_now", type_=TS))
            .select_from(claimed.join(u, true()))).cte("billed")
        statement = statement.add_cte(billed)
    return statement


PG_APPEND = LazyStatements((False, True), _pg_append)
"""The one-statement append, without and with usage rows; built on first use (only
PostgreSQL runs it)."""

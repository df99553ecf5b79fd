"""The statements of the hot path, built once, and what a refused append means.

Built once at import: a call then pays for parameter binding only (building a statement
per call cost more than SQLite's own work). The repository runs them through
SQLAlchemy; the direct driver paths (:mod:`chatkeep.store.direct`) compile these same
objects for their driver, so no statement exists twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

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
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from chatkeep.errors import (
    ChatkeepError,
    InvalidMessage,
    SessionClosed,
    SessionNotFound,
    StoreError,
)
from chatkeep.messages import MessageDraft, Role
from chatkeep.store.rows import MESSAGE_FIELDS, BilledUsage
from chatkeep.store.schema import TS, chat_messages, chat_sessions, chat_tool_calls, chat_usage

Batch = Sequence[tuple[MessageDraft, int | None, BilledUsage | None]]
"""An append's messages: each draft, its token count and the usage to bill with it."""

_M = chat_messages.c
_S = chat_sessions.c

MESSAGE_COLUMNS = [chat_messages.c[name] for name in MESSAGE_FIELDS]
LIVE = _M.retracted_at.is_(None)

# -- the reads every turn makes ----------------------------------------------------------

SESSION_BY_ID = select(chat_sessions).where(_S.id == bindparam("b_session_id"))
_AFTER_WATERMARK = select(*MESSAGE_COLUMNS).where(
    _M.session_id == bindparam("b_session_id"), _M.seq > bindparam("b_watermark"), LIVE)
ALL_LIVE = _AFTER_WATERMARK.order_by(_M.seq)
"""A session never summarised: every live message."""
UNSUMMARISED = union_all(
    select(*MESSAGE_COLUMNS).where(
        _M.session_id == bindparam("b_session_id"), _M.role == "system",
        _M.seq <= bindparam("b_watermark"), LIVE),
    _AFTER_WATERMARK).order_by("seq")
"""Pinned system messages at or below the watermark, then every live message after it."""

# -- writes ------------------------------------------------------------------------------

INSERT_SESSION = insert(chat_sessions).returning(chat_sessions)
SESSION_BY_KEY = select(chat_sessions).where(
    _S.tenant_type == bindparam("b_tenant_type"), _S.tenant_id == bindparam("b_tenant_id"),
    _S.key == bindparam("b_key"))
_KEY_COLUMNS = ["tenant_type", "tenant_id", "key"]
INSERT_KEYED_SESSION = {
    "sqlite": sqlite.insert(chat_sessions).on_conflict_do_nothing(
        index_elements=_KEY_COLUMNS).returning(chat_sessions),
    "postgresql": postgresql.insert(chat_sessions).on_conflict_do_nothing(
        index_elements=_KEY_COLUMNS).returning(chat_sessions),
}
"""Per dialect: insert a keyed session unless the tenant already has that key (then no
row comes back, and the winner of the race is read by :data:`SESSION_BY_KEY`)."""
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
            summary_version=bindparam("b_expected", type_=Integer()) + 1)
    .returning(chat_sessions)
)
"""A fold's compare-and-set: the new summary and watermark, unless another fold won."""
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
SESSION_EXISTS = select(_S.id).where(_S.id == bindparam("b_session_id"))
"""Asked only after a refused claim: missing, or closed?"""


# -- PostgreSQL's one-statement append ---------------------------------------------------

def plain(batch: Batch) -> bool:
    """No tool calls and no tool results: nothing to check against ``chat_tool_calls``."""
    return all(not draft.tool_calls and draft.role is not Role.TOOL for draft, _, _ in batch)


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


PG_APPEND = {False: _pg_append(False), True: _pg_append(True)}
"""The one-statement append, without and with usage rows."""


def pg_append_values(session_id: str, batch: Batch, now: datetime) -> tuple[bool, dict[str, Any]]:
    """Which ``PG_APPEND`` statement a plain batch takes (with usage or not), and its
    values: a PostgreSQL append is one statement, its own transaction."""
    rows = [{"k": k, "role": draft.role.value, "content": draft.content,
             "tool_call_id": draft.tool_call_id, "name": draft.name, "tokens": tokens,
             "metadata": dict(draft.metadata), "native": dict(draft.native) or None}
            for k, (draft, tokens, _) in enumerate(batch, start=1)]
    usages = [{"purpose": b.purpose, "model": b.model,
               "prompt_tokens": b.usage.prompt_tokens,
               "completion_tokens": b.usage.completion_tokens}
              for _, _, b in batch if b is not None]
    values: dict[str, Any] = {
        "b_session_id": session_id, "b_count": len(batch), "b_now": now,
        "b_billed": sum(b.usage.total_tokens for _, _, b in batch if b is not None),
        "b_rows": rows}
    if usages:
        values["b_usages"] = usages
    return bool(usages), values


# -- what a refused append means ---------------------------------------------------------

def refuse(session_id: str, *, exists: bool) -> NoReturn:
    """An append refused: the session is missing, or (it exists) closed."""
    if not exists:
        raise SessionNotFound(f"no session {session_id!r}")
    raise SessionClosed(f"session {session_id!r} is closed")


def append_error(exc: Exception, batch: Batch) -> ChatkeepError:
    """What an integrity error in an append means (SQLAlchemy's, or a driver's): a reused
    tool-call id, or a store failure."""
    orig = exc.orig if isinstance(exc, IntegrityError) else exc
    calls = [c.id for d, _, _ in batch for c in d.tool_calls]
    if calls and "tool_calls" in str(orig):
        return InvalidMessage(f"a tool call id in {calls} is already used in this session")
    return StoreError(f"could not append message: {orig}")


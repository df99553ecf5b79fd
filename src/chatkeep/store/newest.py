"""A session's newest live messages and its summary watermark, in one statement.

Read through a SQLAlchemy ``Connection`` in a read transaction of two statements, each
statement and the end of the transaction would be a trip to aiosqlite's thread under the
async API on SQLite, and the trips cost more than SQLite's own work for a bounded read.
:func:`read_newest_rows` is a procedure of one statement (the watermark a scalar subquery
of it: one snapshot without a transaction), run on a transport
(:mod:`chatkeep.store.direct`) or on the async API's read lane
(:mod:`chatkeep.aio.read_lane`, one trip to its thread). It reads the columns a replay to
a wire format reads (``created_at``, ``tokens`` and ``metadata`` are left out: those of
its messages are ``None``, ``None`` and empty). The Agents SDK's bounded
``get_items(limit)`` reads this way (:mod:`chatkeep.integrations.openai_agents.session`),
and turns the rows into what it returns where the statement ran, inside that one trip
(the procedure's ``then``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Integer, Text, bindparam, select, type_coerce

from chatkeep.errors import SessionNotFound
from chatkeep.messages import Message, ToolCall
from chatkeep.store.executor import Row, Transport
from chatkeep.store.rows import ROLES
from chatkeep.store.schema import chat_messages, chat_sessions
from chatkeep.store.statements import LIVE
from chatkeep.validation import INT32_MAX, check_int

__all__ = ["live_message", "read_newest_rows"]

T = TypeVar("T")

_M = chat_messages.c
WATERMARK = select(chat_sessions.c.summary_watermark).where(
    chat_sessions.c.id == bindparam("b_session_id"))
NEWEST_LIVE = select(
    WATERMARK.scalar_subquery(), _M.seq, _M.role, _M.content,
    type_coerce(_M.tool_calls, Text), _M.tool_call_id, _M.name,
    type_coerce(_M.native, Text),
).where(_M.session_id == bindparam("b_session_id"), LIVE).order_by(_M.seq.desc()).limit(
    bindparam("b_limit", type_=Integer))
"""The newest live messages, newest first (the ``(session_id, seq)`` index walked
backwards), each row led by the session's summary watermark; the JSON columns as the
driver returns them (decoded by :func:`_json`, without the JSON type's layers: no
column has a result processor, so the driver's rows come back as they are). A row:
``(watermark, seq, role, content, tool_calls, tool_call_id, name, native)``."""

def _json(value: Any) -> Any:
    """A JSON column's value as read: its text (SQLite, asyncpg), or already decoded (a
    driver that decodes ``json`` itself); ``NULL`` and JSON ``null`` are ``None``."""
    if type(value) is str:
        return None if value == "null" else json.loads(value)
    return value


def live_message(session_id: str, row: Row) -> Message:
    """A row of :data:`NEWEST_LIVE` as the ``Message`` it stores (``created_at``,
    ``tokens`` and ``metadata`` left out: ``None``, ``None`` and empty)."""
    _, seq, role, content, tool_calls, tool_call_id, name, native = row
    calls = _json(tool_calls) if tool_calls is not None else None
    payload = _json(native) if native is not None else None
    return Message(session_id, int(seq), ROLES[role], content,
                   tuple(ToolCall.from_openai(c) for c in calls) if calls else (),
                   tool_call_id, name, None, None, {},
                   payload if type(payload) is dict else dict(payload or {}))


def read_newest_rows(transport: Transport, session_id: str, limit: int,
                     then: Callable[[int, list[Row]], T]) -> T:
    """The procedure: ``then(watermark, rows)`` over the summary watermark and the rows of
    the newest ``limit`` live messages, oldest first (:data:`NEWEST_LIVE`'s, as the driver
    returned them), read by one statement; ``SessionNotFound`` for no session, and
    ``InvalidArgument`` for a ``limit`` under 1. ``then`` runs where the statement ran,
    after it (no transaction open): on the read lane in its thread, so it must be
    quick, pure work on what it is given (no I/O, no await)."""
    check_int(limit, "limit", minimum=1, maximum=INT32_MAX)
    params = {"b_session_id": session_id, "b_limit": limit}
    with transport.autocommit() as ex:
        rows = ex.rows(NEWEST_LIVE, params)
        if not rows:  # no live message: is there a session?
            found = ex.rows(WATERMARK, params)
            if not found:
                raise SessionNotFound(f"no session {session_id!r}")
            return then(int(found[0][0]), [])
    return then(int(rows[0][0]), list(rows)[::-1])

"""The store's hot procedures, each written once over an executor
(:mod:`chatkeep.store.executor`): a batch append (claiming its seqs, answering tool
calls, billing usage, refusing a closed or missing session), the history read, and the
summary's compare-and-set. Whether their statements go through SQLAlchemy or straight to
the driver is the transport's business; what they mean is decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy.exc import IntegrityError

from chatkeep.errors import (
    ChatkeepError,
    InvalidMessage,
    SessionClosed,
    SessionNotFound,
    StoreError,
)
from chatkeep.messages import Message, MessageDraft, Role
from chatkeep.refs import Ref
from chatkeep.store.executor import Executor, Transport
from chatkeep.store.quotas import (
    PG_APPEND_SETTLE,
    TAKE_RESERVATION,
    Settlement,
    settle_in,
)
from chatkeep.store.rows import (
    BilledUsage,
    SessionRow,
    message_from_row,
    new_messages,
    session_from_row,
    split_at,
    utcnow,
)
from chatkeep.store.schema import ref_values
from chatkeep.store.statements import (
    ALL_LIVE,
    ANSWER_CALL,
    CALL_FOUND,
    CALLS_TAKEN,
    CLAIM_SEQ,
    INSERT_FOLD,
    INSERT_MESSAGE,
    INSERT_SUMMARY_VERSION,
    INSERT_TOOL_CALL,
    INSERT_USAGE,
    LOCK_METADATA,
    MESSAGE_READS,
    PG_APPEND,
    SESSION_BY_ID,
    SESSION_BY_KEY,
    SESSION_EXISTS,
    SET_METADATA,
    SET_SUMMARY,
    TENANT_SESSION_BY_ID,
    UNSUMMARIZED,
    marks_after,
    marks_elsewhere,
    marks_held,
)

TENANT_COLUMNS = ("tenant_type", "tenant_id", "tenant_id_int")
"""A session row's tenant, at positions 1-3 of its columns."""

Batch = Sequence[tuple[MessageDraft, int | None, BilledUsage | None]]
"""An append's messages: each draft, its token count and the usage to bill with it."""

Appended = tuple[list[Message], SessionRow]
"""The messages an append wrote, and the session row after it."""


# -- the append ----------------------------------------------------------------------------

def append(transport: Transport, session_id: str, batch: Batch,
           clock: Callable[[], datetime], settle: Settlement | None = None) -> Appended:
    """Append ``batch`` (not empty) atomically: all of it, with consecutive seqs, its
    tool calls and its usage, or nothing. On PostgreSQL a batch without tool plumbing is
    one statement, its own transaction (one round trip); anything else is one
    transaction, its clock read once it began. ``settle``: the quota reservation the
    answer was held for, settled in the same transaction (the same statement on
    PostgreSQL), so it costs no commit of its own."""
    try:
        if transport.dialect == "postgresql" and plain(batch):
            with transport.autocommit() as ex:
                return _append_in_one_statement(ex, session_id, batch, clock(), settle)
        with transport.transaction() as ex:
            appended = append_in(ex, session_id, batch, clock())
            if settle is not None:
                settle_in(ex, TAKE_RESERVATION, settle.reservation_id, settle.used,
                          settle.clock)
            return appended
    except transport.integrity_errors as exc:
        raise append_error(exc, batch) from None


def append_in(ex: Executor, session_id: str, batch: Batch, now: datetime) -> Appended:
    """The append's statements inside the caller's transaction (integrity errors pass
    through: :func:`append_error` says what they mean). Calls and answers go first: a
    refused answer or a reused call id then fails before anything takes a sequence
    value (PostgreSQL does not give those back)."""
    billed_tokens = sum(b.usage.total_tokens for _, _, b in batch if b is not None)
    claimed = ex.rows(CLAIM_SEQ, {"b_session_id": session_id, "b_count": len(batch),
                                  "b_now": now, "b_billed": billed_tokens})
    if not claimed:
        _refuse(ex, session_id)
    session = session_from_row(claimed[0])
    rows: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    usages: list[dict[str, Any]] = []
    messages = new_messages(session, now, batch)
    for message, (draft, tokens, billed) in zip(messages, batch, strict=True):
        seq = message.seq
        rows.append({
            "session_id": session_id, "seq": seq, "role": draft.role.value,
            "content": draft.content,
            "tool_calls": [c.to_openai() for c in draft.tool_calls] or None,
            "tool_call_id": draft.tool_call_id, "name": draft.name, "tokens": tokens,
            "created_at": now, "metadata": message.metadata,
            "native": message.native or None,
        })
        calls.extend({"session_id": session_id, "call_id": c.id, "call_seq": seq,
                      "name": c.name, "result_seq": None} for c in draft.tool_calls)
        if billed is not None:
            usages.append(usage_values(session, billed, now))
    if calls:
        ex.many(INSERT_TOOL_CALL, calls)
    for message in messages:
        if message.role is Role.TOOL:
            _answer_tool_call(ex, session_id, message.tool_call_id, message.seq)
    ex.many(INSERT_MESSAGE, rows)
    if usages:
        ex.many(INSERT_USAGE, usages)
    return messages, session


def _append_in_one_statement(ex: Executor, session_id: str, batch: Batch,
                             now: datetime, settle: Settlement | None = None) -> Appended:
    """PostgreSQL, a batch without tool plumbing: claim the seq range, insert the messages
    and their usage in one statement (data-modifying CTEs), instead of BEGIN, UPDATE,
    INSERT(s) and COMMIT; with ``settle``, the reservation's settle in it too."""
    usage, values = pg_append_values(session_id, batch, now)
    if settle is None:
        claimed = ex.rows(PG_APPEND[usage], values)
    else:
        claimed = ex.rows(PG_APPEND_SETTLE[usage], {**values, **settle.pg_params()})
    if not claimed:
        _refuse(ex, session_id)
    session = session_from_row(claimed[0])
    return new_messages(session, now, batch), session


def _answer_tool_call(ex: Executor, session_id: str, call_id: str | None, seq: int) -> None:
    """Mark the call answered by ``seq``: one ``UPDATE ... RETURNING`` on the happy path;
    only a refused answer reads the call again to say why."""
    if not call_id:
        raise InvalidMessage("a tool message needs the tool_call_id it answers")
    if ex.rows(ANSWER_CALL, {"b_session_id": session_id, "b_call_id": call_id, "b_seq": seq}):
        return
    found = ex.rows(CALL_FOUND, {"b_session_id": session_id, "b_call_id": call_id})
    if not found or found[0][0] >= seq:
        raise InvalidMessage(
            f"tool result for {call_id!r} has no matching earlier tool call in this session")
    raise InvalidMessage(
        f"tool call {call_id!r} was already answered by message seq {found[0][1]}")


def _refuse(ex: Executor, session_id: str) -> NoReturn:
    """No seq was claimed: the session is missing, or (it exists) closed."""
    if not ex.rows(SESSION_EXISTS, {"b_session_id": session_id}):
        raise SessionNotFound(f"no session {session_id!r}")
    raise SessionClosed(f"session {session_id!r} is closed")


def usage_values(session: SessionRow, billed: BilledUsage, now: datetime) -> dict[str, Any]:
    """A ``chat_usage`` row: ``billed`` on ``session``'s tenant."""
    return {"session_id": session.id, **ref_values("tenant", session.tenant),
            "purpose": billed.purpose, "model": billed.model,
            "prompt_tokens": billed.usage.prompt_tokens,
            "completion_tokens": billed.usage.completion_tokens, "created_at": now}


def plain(batch: Batch) -> bool:
    """No tool calls and no tool results: nothing to check against ``chat_tool_calls``."""
    return all(not draft.tool_calls and draft.role is not Role.TOOL for draft, _, _ in batch)


def pg_append_values(session_id: str, batch: Batch, now: datetime) -> tuple[bool, dict[str, Any]]:
    """Which ``PG_APPEND`` statement a plain batch takes (with usage or not), and its
    values."""
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


def append_error(exc: Exception, batch: Batch) -> ChatkeepError:
    """What an integrity error in an append means (SQLAlchemy's, or a driver's): a reused
    tool-call id, or a store failure."""
    orig = exc.orig if isinstance(exc, IntegrityError) else exc
    calls = [c.id for d, _, _ in batch for c in d.tool_calls]
    if calls and "tool_calls" in str(orig):
        return InvalidMessage(f"a tool call id in {calls} is already used in this session")
    return StoreError(f"could not append message: {orig}")


# -- reads and the summary -----------------------------------------------------------------

def load_session(ex: Executor, session_id: str) -> SessionRow:
    """The session row, or ``SessionNotFound``."""
    found = ex.rows(SESSION_BY_ID, {"b_session_id": session_id})
    if not found:
        raise SessionNotFound(f"no session {session_id!r}")
    return session_from_row(found[0])


def read_messages(transport: Transport, session_id: str, after_seq: int,
                  through_seq: int | None, limit: int | None,
                  live_only: bool) -> list[Message]:
    """Messages with ``after_seq < seq <= through_seq`` in order (an index range), at most
    ``limit``; ``live_only`` leaves retracted ones out. One statement, its own snapshot."""
    statement = MESSAGE_READS[(live_only, through_seq is not None, limit is not None)]
    with transport.autocommit() as ex:
        return [message_from_row(r) for r in ex.rows(statement, {
            "b_session_id": session_id, "b_after": after_seq, "b_through": through_seq,
            "b_limit": limit})]


def marks_after_seq(transport: Transport, session_id: str, key: str,
                    after_seq: int) -> set[str]:
    """The values under metadata ``key`` of the session's messages after ``after_seq``:
    one statement."""
    with transport.autocommit() as ex:
        found = ex.rows(marks_after(key), {"b_session_id": session_id, "b_after": after_seq})
    return {r[0] for r in found if r[0] is not None}


def get_session(transport: Transport, session_id: str, tenant: Ref | None) -> SessionRow:
    """The session row (with ``tenant``: only if that tenant owns it), or
    ``SessionNotFound``: one statement."""
    with transport.autocommit() as ex:
        if tenant is None:
            return load_session(ex, session_id)
        found = ex.rows(TENANT_SESSION_BY_ID, {
            "b_session_id": session_id, "b_tenant_type": tenant.type,
            "b_tenant_id": tenant.id_text})
    if not found:
        raise SessionNotFound(f"no session {session_id!r} for tenant {tenant}")
    return session_from_row(found[0])


def find_session(transport: Transport, tenant: Ref, key: str) -> SessionRow | None:
    """The tenant's session named ``key``, or ``None``: one statement."""
    with transport.autocommit() as ex:
        found = ex.rows(SESSION_BY_KEY, {"b_tenant_type": tenant.type,
                                         "b_tenant_id": tenant.id_text, "b_key": key})
    return session_from_row(found[0]) if found else None


def read_history(transport: Transport,
                 session_id: str) -> tuple[SessionRow, list[Message], list[Message]]:
    """The session row, then its system messages at or below the summary watermark and
    every live message after it, on one connection (one snapshot on SQLite). The
    watermark goes to the second statement as a value, not joined from the row: then
    the planner knows how few rows follow it."""
    with transport.reading() as ex:
        row = load_session(ex, session_id)
        watermark = row.summary_watermark
        raws = ex.rows(UNSUMMARIZED if watermark > 0 else ALL_LIVE,
                       {"b_session_id": session_id, "b_watermark": watermark})
        return (row, *split_at([message_from_row(r) for r in raws], watermark))


def set_summary(transport: Transport, session_id: str, expected_version: int, summary: str,
                watermark: int, fold: dict[str, Any] | None = None,
                now: datetime | None = None) -> SessionRow | None:
    """A fold's compare-and-set, in a transaction of its own: the new row, or ``None``
    when another writer moved ``summary_version`` first. ``fold`` (``from_seq``,
    ``calls``, ``prompt_tokens``, ``completion_tokens``, ``model``) is recorded with it in
    ``chat_folds``: the seqs the fold took and what it cost. The summary is kept at its
    version too (``chat_summary_versions``), so a past request can be rebuilt."""
    with transport.transaction() as ex:
        found = ex.rows(SET_SUMMARY, {"b_session_id": session_id,
                                      "b_expected": expected_version,
                                      "b_summary": summary, "b_watermark": watermark})
        if found:
            tenant = dict(zip(TENANT_COLUMNS, tuple(found[0])[1:4], strict=True))
            ex.many(INSERT_SUMMARY_VERSION, [{
                "session_id": session_id, **tenant, "version": expected_version + 1,
                "watermark": watermark, "summary": summary, "created_at": now or utcnow()}])
        if found and fold is not None:
            ex.many(INSERT_FOLD, [{"session_id": session_id, "version": expected_version + 1,
                                   "through_seq": watermark, "created_at": now, **fold}])
    return session_from_row(found[0]) if found else None


class KeepState:
    """``decide``'s answer to :func:`swap_state`: leave the state alone, write nothing."""


KEEP_STATE = KeepState()
REMOVE_STATE: dict[str, Any] = {}
"""``decide``'s answer to :func:`swap_state`: remove the state from the session."""

State = dict[str, Any] | None
Decide = Callable[[State], "dict[str, Any] | KeepState"]


def swap_state(transport: Transport, session_id: str, key: str, decide: Decide,
               batch: Batch, now: datetime) -> tuple[list[Message], SessionRow | None]:
    """A compare-and-set on the state an integration keeps under ``key`` in the session's
    metadata, atomic with an append: in one transaction, lock the session, hand ``decide``
    the stored state, and unless it answers :data:`KEEP_STATE`, append ``batch`` (with
    every rule of :func:`append_in`) and store the state it returned
    (:data:`REMOVE_STATE` removes it). Returns the appended messages and the row after the
    write (``None`` when nothing was written). ``decide`` refuses by raising."""
    try:
        with transport.transaction() as ex:
            locked = ex.rows(LOCK_METADATA, {"b_session_id": session_id})
            if not locked:
                raise SessionNotFound(f"no session {session_id!r}")
            metadata = dict(locked[0][0] or {})
            stored = metadata.get(key)
            answer = decide(stored if isinstance(stored, dict) else None)
            if isinstance(answer, KeepState):
                return [], None
            messages: list[Message] = []
            if batch:
                messages, _ = append_in(ex, session_id, batch, now)
            if answer is REMOVE_STATE:
                metadata.pop(key, None)
            else:
                metadata[key] = answer
            row = ex.rows(SET_METADATA, {"b_session_id": session_id, "b_metadata": metadata})
            return messages, session_from_row(row[0])
    except transport.integrity_errors as exc:
        raise append_error(exc, batch) from None


#: Values one ``IN`` list carries (well under every backend's parameter cap).
MARKS_PER_QUERY = 500


def append_unmarked(transport: Transport, session_id: str, key: str, batch: Batch,
                    now: datetime) -> list[Message]:
    """Append the items of ``batch`` whose draft's metadata ``key`` (an integration's
    id for the message) the session does not hold yet, idempotent under concurrency: in
    one transaction, lock the session, ask which of the batch's ids any of its messages
    holds, append the rest (with every rule of :func:`append_in`). Two writers of the
    same messages queue on the lock; the second appends nothing. Whatever the caller
    decided was new, the database has the last word: overlapping runs of one thread
    decide from states that differ. Returns what was appended."""
    try:
        with transport.transaction() as ex:
            if not ex.rows(LOCK_METADATA, {"b_session_id": session_id}):
                raise SessionNotFound(f"no session {session_id!r}")
            held = marks_in_session(ex, transport.dialect, session_id, key,
                                    [str(d.metadata[key]) for d, _, _ in batch
                                     if d.metadata.get(key) is not None])
            fresh = []
            for item in batch:
                mark = item[0].metadata.get(key)
                if mark is not None:
                    if str(mark) in held:
                        continue
                    held.add(str(mark))
                fresh.append(item)
            if not fresh:
                return []
            return append_in(ex, session_id, fresh, now)[0]
    except transport.integrity_errors as exc:
        raise append_error(exc, batch) from None


def _found(ex: Executor, statement: Any, params: Mapping[str, Any], name: str,
           values: Iterable[str]) -> set[str]:
    """Which of ``values`` ``statement`` finds (its first column), asked with the values
    bound to ``name`` in lists of :data:`MARKS_PER_QUERY`, beside ``params``."""
    wanted = list(dict.fromkeys(values))
    found: set[str] = set()
    for start in range(0, len(wanted), MARKS_PER_QUERY):
        found.update(r[0] for r in ex.rows(statement, {
            **params, name: wanted[start:start + MARKS_PER_QUERY]}))
    return found


def looked_up(transport: Transport, lookup: Callable[[Executor, list[str]], set[str]],
              values: Iterable[str]) -> set[str]:
    """``lookup(ex, values)`` (which of the values the database holds) over ``transport``:
    one statement on its own, in autocommit; or, when the values take several statements
    (:data:`MARKS_PER_QUERY` each), those in one read."""
    wanted = list(dict.fromkeys(values))
    opened = transport.reading() if len(wanted) > MARKS_PER_QUERY else transport.autocommit()
    with opened as ex:
        return lookup(ex, wanted)


def marks_in_session(ex: Executor, dialect: str, session_id: str, key: str,
                     marks: Iterable[str]) -> set[str]:
    """Which of ``marks`` (ids under metadata ``key``) the session's messages carry,
    retracted ones included: for the indexed key a probe of its index per id."""
    return _found(ex, marks_held(dialect, key), {"b_session_id": session_id}, "b_marks",
                  marks)


def calls_taken(ex: Executor, session_id: str, call_ids: Sequence[str]) -> set[str]:
    """Which of ``call_ids`` the session's tool calls already use."""
    return _found(ex, CALLS_TAKEN, {"b_session_id": session_id}, "b_call_ids", call_ids)


def marks_in_other_sessions(ex: Executor, session_id: str, session_key: str, key: str,
                            marks: Sequence[str]) -> set[str]:
    """Which of ``marks`` (ids under metadata ``key``) messages of another session named
    ``session_key`` carry: another tenant's session of the same key."""
    return _found(ex, marks_elsewhere(key), {"b_session_id": session_id, "b_key": session_key},
                  "b_marks", marks)

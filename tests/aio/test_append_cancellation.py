"""A cancelled async append (issue 37 item 4) is whole or absent, never half-written, and
leaves no connection inside a transaction; and what an async append stores is what the
sync API stores for the same calls.

The cancellation lands while the append is stopped halfway: on SQLite inside aiosqlite's
thread, at the seq claim inside its transaction (a trace callback on the thread's
``sqlite3`` connection holds it there: the one-trip path, where the whole append is one
call in that thread, goes on to its end and commits, as the Agents SDK's append does once
it is in its thread); on PostgreSQL on a lock another connection holds on the tool call
the batch answers (after its seq claim and its new call's insert) or, for a plain batch,
on the session's row. Both event loops: asyncio's and uvloop's.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.aio import AsyncChatkeep, AsyncChatSession
from support.postgres import PG_URL, with_driver

ORG = Ref("organization", 1)
BOUND = 30.0
"""Seconds any wait here may take before the test fails (none should come near it)."""

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def run_on(loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``main()`` on a fresh loop of the kind named."""
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())


class Halt:
    """Where the append stops once ``armed``: ``reached`` is set once it is there, and it
    goes on once ``release`` is set."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.reached = threading.Event()
        self.release = threading.Event()


def halt_sqlite_at_the_claim(keep: AsyncChatkeep, halt: Halt) -> None:
    """On every new aiosqlite connection of ``keep``: the thread stops as the seq claim
    starts (inside the append's transaction, ``BEGIN IMMEDIATE`` sent; had the statements
    been trips of their own, none after it would be sent)."""

    @event.listens_for(keep.engine.sync_engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        inner = dbapi_connection.driver_connection._conn  # the thread's sqlite3 connection

        def trace(sql: str) -> None:
            if sql.startswith("UPDATE chat_sessions") and halt.armed.is_set() \
                    and not halt.reached.is_set():
                halt.reached.set()
                halt.release.wait(BOUND)

        inner.set_trace_callback(trace)


@contextmanager
def postgres_lock(url: str, sql: str, params: tuple[Any, ...]) -> Iterator[Callable[[], int]]:
    """Another connection holding the row locks ``sql`` takes (in a transaction) until
    the block ends; yields a count of the connections waiting on it."""
    import psycopg

    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0]
    dsn = with_driver(PG_URL, None)
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as watcher:
        holder.execute(f"SET search_path TO {schema}")
        holder.execute(sql, params)
        pid = holder.info.backend_pid

        def waiting() -> int:
            row = watcher.execute("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)).fetchone()
            return int(row[0]) if row else 0

        try:
            yield waiting
        finally:
            holder.rollback()


async def until(condition: Callable[[], Any]) -> None:
    """Poll ``condition`` off the loop until it holds (fails after ``BOUND`` seconds)."""
    for _ in range(int(BOUND / 0.01)):
        if await asyncio.to_thread(condition):
            return
        await asyncio.sleep(0.01)
    pytest.fail("the append never reached the point it was to be cancelled at")


async def the_batch(session: AsyncChatSession, kind: str) -> None:
    """The append that gets cancelled: a user message, or a tool result answering c0
    with an assistant message making call c1 (claim, call insert, answer, messages)."""
    if kind == "plain":
        await session.add_user("cancelled?")
    else:
        await session.record([{"role": "tool", "tool_call_id": "c0", "content": "r0"},
                              {"role": "assistant", "content": None, "tool_calls": [CALL]}],
                             format="openai_chat")


def stored(url: str, session_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]],
                                                int]:
    """Messages (seq, role, content), tool calls (id, call seq, result seq) and the
    session's last seq, read by a fresh sync keep."""
    keep = Chatkeep(url, dispatcher="inline")
    try:
        with keep.engine.connect() as conn:
            messages = [tuple(r) for r in conn.execute(text(
                "SELECT seq, role, content FROM chat_messages WHERE session_id = :s "
                "ORDER BY seq"), {"s": session_id})]
            calls = [tuple(r) for r in conn.execute(text(
                "SELECT call_id, call_seq, result_seq FROM chat_tool_calls "
                "WHERE session_id = :s ORDER BY call_id"), {"s": session_id})]
            last_seq = conn.execute(text("SELECT last_seq FROM chat_sessions WHERE id = :s"),
                                    {"s": session_id}).scalar_one()
        return messages, calls, int(last_seq)
    finally:
        keep.engine.dispose()


def assert_no_transaction_left_open(url: str, session_id: str) -> None:
    """A writer gets the lock an append takes (SQLite's write lock, the session's row on
    PostgreSQL) within ``BOUND`` seconds: no connection sits inside the cancelled append's
    transaction."""
    if url.startswith("sqlite"):
        writer = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=BOUND,
                                 isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("ROLLBACK")
        finally:
            writer.close()
        return
    import psycopg

    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0]
    with psycopg.connect(with_driver(PG_URL, None)) as probe:
        probe.execute(f"SET search_path TO {schema}")
        probe.execute(f"SET lock_timeout = '{int(BOUND)}s'")
        probe.execute("SELECT id FROM chat_sessions WHERE id = %s FOR UPDATE", (session_id,))
        probe.rollback()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("kind", ["plain", "tools"])
def test_a_cancelled_append_is_whole_or_absent_and_holds_no_transaction(
        db_url: str, kind: str, loop: str) -> None:
    sqlite = db_url.startswith("sqlite")
    halt = Halt()
    outcome: dict[str, Any] = {}

    async def main() -> None:
        keep = AsyncChatkeep(db_url, dispatcher="inline")
        if sqlite:
            halt_sqlite_at_the_claim(keep, halt)
        try:
            session = await keep.sessions.create(ORG)
            await session.add_user("first")
            await session.add_assistant(tool_calls=[{**CALL, "id": "c0"}])
            outcome["id"] = session.id
            if sqlite:
                halt.armed.set()
                task = asyncio.create_task(the_batch(session, kind))
                await until(halt.reached.is_set)
                task.cancel()
                halt.release.set()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                lock = ("SELECT 1 FROM chat_sessions WHERE id = %s FOR UPDATE" if kind == "plain"
                        else "SELECT 1 FROM chat_tool_calls WHERE session_id = %s "
                             "AND call_id = 'c0' FOR UPDATE")
                with postgres_lock(db_url, lock, (session.id,)) as waiting:
                    task = asyncio.create_task(the_batch(session, kind))
                    await until(waiting)
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
            assert task.cancelled()
            assert_no_transaction_left_open(db_url, session.id)
            # The keep goes on: its next append takes the next seq after what is stored.
            outcome["next"] = (await session.add_user("after")).seq
        finally:
            halt.release.set()
            await keep.close()

    run_on(loop, main)
    messages, calls, last_seq = stored(db_url, outcome["id"])
    before: list[tuple[Any, ...]] = [(1, "user", "first"), (2, "assistant", None)]
    batches: dict[str, list[tuple[Any, ...]]] = {
        "plain": [(3, "user", "cancelled?")], "tools": [(3, "tool", "r0"), (4, "assistant", None)]}
    written = batches[kind]
    whole = messages[:-1] == before + written
    assert whole or messages[:-1] == before, messages  # never part of the batch
    assert messages[-1] == (outcome["next"], "user", "after")
    assert [m[0] for m in messages] == list(range(1, len(messages) + 1))
    assert last_seq == len(messages)  # no seq claimed without its message
    if kind == "tools":
        assert calls == ([("c0", 2, 3), ("c1", 4, None)] if whole else [("c0", 2, None)])
    else:
        assert calls == [("c0", 2, None)]


def script(session: Any) -> list[Any]:
    """The same appends, for a sync session (calls) or an async one (coroutines)."""
    call = {"id": "call_a", "type": "function",
            "function": {"name": "search", "arguments": '{"q": "caf\u00e9"}'}}
    other = {"id": "call_b", "type": "function", "function": {"name": "noop", "arguments": ""}}
    return [
        lambda: session.add_user("hello \u2014 world", metadata={"k": [1, None, "v"]}),
        lambda: session.add_system("be brief"),
        lambda: session.add_assistant("hi", usage=Usage(11, 7), model="m-1"),
        lambda: session.add_assistant(tool_calls=[call, other], usage=Usage(3, 2), model="m-2"),
        lambda: session.add_tool_result("call_a", {"hits": ["x", "y"]}, name="search"),
        lambda: session.add_tool_result("call_b", ""),
        lambda: session.record([{"role": "user", "content": "one"},
                                {"role": "assistant", "content": "two"}],
                               format="openai_chat"),
        lambda: session.add_message("user", "named", name="alice"),
    ]


def rows_of(keep: Chatkeep, session_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """What a session's appends stored, as text, without ids and times."""
    queries = {
        "messages": "SELECT seq, role, content, CAST(tool_calls AS TEXT), tool_call_id, name, "
                    "tokens, CAST(metadata AS TEXT), CAST(native AS TEXT), retracted_at "
                    "FROM chat_messages WHERE session_id = :s ORDER BY seq",
        "calls": "SELECT call_id, call_seq, name, result_seq FROM chat_tool_calls "
                 "WHERE session_id = :s ORDER BY call_id",
        "usage": "SELECT purpose, model, prompt_tokens, completion_tokens FROM chat_usage "
                 "WHERE session_id = :s ORDER BY id",
        "session": "SELECT total_tokens, last_seq FROM chat_sessions WHERE id = :s",
    }
    with keep.engine.connect() as conn:
        return {name: [tuple(r) for r in conn.execute(text(sql), {"s": session_id})]
                for name, sql in queries.items()}


def test_async_appends_store_what_sync_appends_store(db_url: str) -> None:
    keep = Chatkeep(db_url, dispatcher="inline")
    try:
        sync_session = keep.sessions.create(ORG)
        sync_results = [append() for append in script(sync_session)]

        async def main() -> tuple[str, list[Any]]:
            async with AsyncChatkeep(db_url, dispatcher="inline") as akeep:
                session = await akeep.sessions.create(ORG)
                return session.id, [await append() for append in script(session)]

        async_id, async_results = asyncio.run(main())
        expected = rows_of(keep, sync_session.id)
        assert len(expected["messages"]) == 9 and len(expected["usage"]) == 2
        assert rows_of(keep, async_id) == expected

        def returned(results: list[Any]) -> list[Any]:
            flat = [m for r in results for m in (r if isinstance(r, list) else [r])]
            return [(m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.tokens,
                     m.metadata, m.native) for m in flat]

        assert returned(async_results) == returned(sync_results)
    finally:
        keep.engine.dispose()

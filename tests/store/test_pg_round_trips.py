"""PostgreSQL round trips on the hot path: a plain append is one statement that is its own
transaction, reads run in autocommit (no BEGIN, no ROLLBACK: psycopg forgets its prepared
statements on every ROLLBACK), ``build_history`` reads on one connection, and a pooled
connection is pinged only after sitting idle."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_workers import backend_pid, pg_dsn
from sqlalchemy import event, select, update

from chatkeep import Chatkeep, Ref, SessionClosed, SessionNotFound, Usage
from chatkeep.messages import MessageDraft, Role
from chatkeep.sessions import prepare_batch
from chatkeep.store.connections import autocommits, transaction
from chatkeep.store.schema import chat_messages, chat_sessions, chat_usage
from chatkeep.tokens import HeuristicCounter
from support.postgres import with_driver

pytestmark = pytest.mark.postgres


@pytest.fixture
def keep(pg_schema_url: str) -> Iterator[Chatkeep]:
    with Chatkeep(pg_schema_url, dispatcher="inline") as made:
        yield made


def watch(keep: Chatkeep) -> list[tuple[str, bool]]:
    """Each statement's first word, and whether its connection was in autocommit."""
    seen: list[tuple[str, bool]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((statement.split()[0], conn.connection.driver_connection.autocommit))

    event.listen(keep.engine, "before_cursor_execute", record)
    return seen


def test_a_plain_append_is_one_autocommit_statement_that_writes_everything(
        keep: Chatkeep) -> None:
    session = keep.sessions.create(Ref("organization", 7))
    seen = watch(keep)
    session.add_user("hello", metadata={"k": [1, "two"]})
    session.add_assistant("hi", usage=Usage(5, 3), model="m")
    assert seen == [("WITH", True), ("WITH", True)]

    with keep.engine.connect() as conn:
        rows = conn.execute(select(chat_messages.c.seq, chat_messages.c.role,
                                   chat_messages.c.content, chat_messages.c.metadata,
                                   chat_messages.c.native)
                            .where(chat_messages.c.session_id == session.id)
                            .order_by(chat_messages.c.seq)).all()
        usage = conn.execute(select(chat_usage.c.tenant_type, chat_usage.c.tenant_id,
                                    chat_usage.c.prompt_tokens, chat_usage.c.model)).all()
    assert [tuple(r) for r in rows] == [(1, "user", "hello", {"k": [1, "two"]}, None),
                                        (2, "assistant", "hi", {}, None)]
    assert [tuple(u) for u in usage] == [("organization", "7", 5, "m")]
    assert session.refresh().total_tokens == 8
    assert [(u.prompt_tokens, u.completion_tokens, u.calls)
            for u in keep.usage(Ref("organization", 7))] == [(5, 3, 1)]
    assert [m.seq for m in session.messages] == [1, 2]


def test_build_history_reads_row_and_tail_on_one_connection_in_autocommit(
        keep: Chatkeep) -> None:
    session = keep.sessions.create(Ref("organization", 7))
    session.add_system("Answer in French.")
    session.add_user("hello")
    seen = watch(keep)
    history = keep.compressor.build_history(session, "You help.")
    # The reads: the row and the tail, in autocommit on one connection. Then the request's
    # replay manifest and the texts it names (issue 34), one statement in autocommit too,
    # whose commit does not wait for the WAL flush (set_config, local to it).
    assert seen == [("SELECT", True), ("SELECT", True), ("WITH", True)]
    assert [m["content"] for m in history[1:]] == ["Answer in French.", "hello"]
    empty = keep.sessions.create(Ref("organization", 7))
    assert [m["role"] for m in keep.compressor.build_history(empty, "You help.")] == [
        "system"]
    with pytest.raises(SessionNotFound):
        keep.repository.read_history("no-such-session")


def test_a_refused_one_statement_append_says_why_and_writes_nothing(keep: Chatkeep) -> None:
    session = keep.sessions.create(Ref("organization", 7))
    session.add_user("hello")
    session.close()
    with pytest.raises(SessionClosed):
        session.add_user("after the close")
    with pytest.raises(SessionNotFound):
        keep.repository.append_messages("no-such-session", prepare_batch(
            [MessageDraft(Role.USER, "hello")], HeuristicCounter()))
    with keep.engine.connect() as conn:
        count = conn.execute(select(chat_messages.c.seq)).all()
    assert len(count) == 1


def test_connections_autocommit_from_connect_and_a_transaction_is_still_one(
        keep: Chatkeep) -> None:
    # The engine autocommits by default, so a turn's checkouts switch nothing ...
    assert autocommits(keep.engine)
    with keep.engine.connect() as conn:
        assert conn.connection.driver_connection.autocommit
    # ... and a transaction switches its connection for the block: a failure inside it
    # leaves nothing behind, and the connection goes back to the pool autocommitting.
    session = keep.sessions.create(Ref("organization", 7))
    with pytest.raises(RuntimeError), transaction(keep.engine) as conn:
        assert not conn.connection.driver_connection.autocommit
        conn.execute(update(chat_sessions).where(chat_sessions.c.id == session.id)
                     .values(title="half-written"))
        raise RuntimeError("fails mid-transaction")
    assert keep.sessions.get_unscoped(session.id).title is None
    with keep.engine.connect() as conn:
        assert conn.connection.driver_connection.autocommit
    # The pool does no rollback on checkin (nothing is ever left open for one): the
    # failed transaction above was ended by its own connection.
    assert keep.engine.pool._reset_on_return.name == "reset_none"  # type: ignore[attr-defined]
    for record in list(keep.engine.pool._pool.queue):  # type: ignore[attr-defined]
        status = record.dbapi_connection.info.transaction_status
        assert status == psycopg.pq.TransactionStatus.IDLE


def pooled_backends(keep: Chatkeep) -> set[int]:
    """The backend pids of the connections now idle in the pool."""
    pids = set()
    for record in list(keep.engine.pool._pool.queue):  # type: ignore[attr-defined]
        pids.add(record.dbapi_connection.info.backend_pid)
    return pids


def count_pings(keep: Chatkeep, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    real = keep.engine.dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real(dbapi_connection)

    monkeypatch.setattr(keep.engine.dialect, "do_ping", counting)
    return pings


def test_a_connection_back_from_a_call_moments_ago_is_used_without_a_ping(
        keep: Chatkeep, monkeypatch: pytest.MonkeyPatch) -> None:
    session = keep.sessions.create(Ref("organization", 7))
    pings = count_pings(keep, monkeypatch)
    for n in range(5):
        session.add_user(f"question {n}")
        keep.compressor.build_history(session, "You help.")
    assert pings == []


def test_a_connection_killed_while_idle_is_replaced_before_use(
        keep: Chatkeep, pg_schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    session = keep.sessions.create(Ref("organization", 7))
    session.add_user("hello")
    pids = pooled_backends(keep)
    assert pids
    dsn = pg_dsn(pg_schema_url).split("?")[0]
    with psycopg.connect(dsn, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    monkeypatch.setattr(time, "monotonic", lambda real=time.monotonic: real() + 60)
    pings = count_pings(keep, monkeypatch)
    session.add_user("after the failover")  # no StoreError: the dead one failed its ping
    assert pings and [m.content for m in session.messages] == ["hello", "after the failover"]
    assert not pids & pooled_backends(keep)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_an_async_connection_killed_while_idle_is_replaced_before_use(
        pg_schema_url: str, monkeypatch: pytest.MonkeyPatch, driver: str) -> None:
    """The same idle ping on the async engine (asyncpg, or psycopg's async connection,
    checked out inside the greenlet bridge)."""
    import asyncio

    from chatkeep.aio import AsyncChatkeep

    dsn = pg_dsn(pg_schema_url).split("?")[0]

    async def scenario() -> list[str | None]:
        async with AsyncChatkeep(with_driver(pg_schema_url, driver),
                                 dispatcher="inline") as akeep:
            assert akeep.engine.dialect.driver == driver
            session = await akeep.sessions.create(Ref("organization", 7))
            await session.add_user("hello")
            # The running loop's pool (the async engine keeps one per loop).
            pool = akeep.engine.sync_engine.pool.current()  # type: ignore[attr-defined]
            idle = pool._pool._queue._queue
            pids = {backend_pid(r.dbapi_connection.driver_connection) for r in list(idle)}
            assert pids
            with psycopg.connect(dsn, autocommit=True) as admin:
                for pid in pids:
                    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            monkeypatch.setattr(time, "monotonic", lambda real=time.monotonic: real() + 60)
            await session.add_user("after the failover")
            return [m.content for m in await session.read_messages()]

    assert asyncio.run(scenario()) == ["hello", "after the failover"]

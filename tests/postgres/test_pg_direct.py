"""PostgreSQL's direct path (``chatkeep.store.direct``), on the sync and the async API: a
plain append and the history read sent to psycopg itself store and read exactly what the
Core path does, step aside while anything listens to statement events, and a backend
killed under them is a ``StoreError`` that leaves nothing behind and a usable pool."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pg_workers import pg_dsn
from sqlalchemy import event

from chatkeep import Chatkeep, Ref, SessionClosed, SessionNotFound, StoreError, Usage
from chatkeep.messages import Role
from chatkeep.store.direct import PostgresDirect

pytestmark = pytest.mark.postgres

ORG = Ref("organization", 7)
ALICE = Ref("user", 3)


def repository_of(keep: Any) -> Any:
    """The core repository itself (on the async axis, the one inside the bridge)."""
    return getattr(keep, "core", keep).repository


def assert_pool_idle(engine: Any, dsn: str) -> None:
    """No connection sits in an open transaction: the pool skips its rollback on checkin
    (chatkeep's PostgreSQL engines), so nothing may ever need it."""
    assert engine.pool._reset_on_return.name == "reset_none"
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE state LIKE "
                            "'idle in transaction%' AND pid <> pg_backend_pid()").fetchone()
    assert row is not None and row[0] == 0


def snapshot(dsn: str, session_id: str) -> dict[str, Any]:
    """A session as stored, its id and serial ids left out: what both paths must write."""
    with psycopg.connect(dsn) as conn:
        session = conn.execute(
            "SELECT tenant_type, tenant_id, tenant_id_int, actor_type, actor_id, title, "
            "anonymize_pii, total_tokens, last_seq, summary, summary_watermark, "
            "summary_version, last_message_at, metadata FROM chat_sessions WHERE id = %s",
            (session_id,)).fetchone()
        messages = conn.execute(
            "SELECT seq, role, content, tool_calls, tool_call_id, name, tokens, created_at, "
            "metadata::text, native::text, retracted_at FROM chat_messages "
            "WHERE session_id = %s ORDER BY seq", (session_id,)).fetchall()
        usage = conn.execute(
            "SELECT tenant_type, tenant_id, purpose, model, prompt_tokens, completion_tokens, "
            "created_at FROM chat_usage WHERE session_id = %s ORDER BY id",
            (session_id,)).fetchall()
    return {"session": session, "messages": messages, "usage": usage}


def write_a_conversation(keep: Any) -> Any:
    session = keep.sessions.create(ORG, actor=ALICE, metadata={"a": [1, None]})
    session.add_system("Pinned: answer briefly.")
    session.add_user("hi é \u2028 100% %s %(x)s 'quoted' \"double\"", name="alice",
                     metadata={"k": [1, "two"]})
    session.add_assistant("an answer", usage=Usage(3, 4), model="m")
    session.record([{"role": "user", "content": "two at once"},
                    {"role": "assistant", "content": "both stored"}], format="openai_chat")
    session.add_assistant("calling", tool_calls=[  # tool plumbing: the Core path's
        {"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        usage=Usage(1, 2), model="m")
    session.add_tool_result("c1", "r1")
    session.add_assistant("done", usage=Usage(5, 6), model="m")
    return session


def test_the_direct_path_writes_and_reads_what_the_core_path_does(
        pg_url: str, pg_keep: Callable[..., Chatkeep]) -> None:
    keep = pg_keep(dispatcher="inline")
    repo = repository_of(keep)
    direct = repo._direct
    assert isinstance(direct, PostgresDirect) and direct.usable
    clock = datetime(2026, 11, 5, 9, 30, tzinfo=UTC)
    repo.clock = lambda: clock
    used: list[str] = []
    real_append, real_read = direct.append, direct.read_history
    direct.append = lambda *a: (used.append("append"), real_append(*a))[1]
    direct.read_history = lambda *a: (used.append("read"), real_read(*a))[1]

    def summarise(session: Any) -> list[Any]:  # a fold's write, then one that lost a race
        return [keep.repository.compare_and_set_summary(session.id, 0, "summary", 4),
                keep.repository.compare_and_set_summary(session.id, 0, "late", 6)]

    fast = write_a_conversation(keep)
    assert used.count("append") == 5  # the plain appends; the tool turn went through Core
    fast_folds = summarise(fast)
    repo._direct = None
    core = write_a_conversation(keep)
    core_folds = summarise(core)
    repo._direct = direct
    assert fast_folds[1] is None and core_folds[1] is None
    assert dataclasses.replace(fast_folds[0], id="") == dataclasses.replace(core_folds[0], id="")

    dsn = pg_dsn(pg_url)
    assert snapshot(dsn, fast.id) == snapshot(dsn, core.id)

    def both(session_id: str) -> tuple[Any, Any]:
        through_driver = keep.repository.read_history(session_id)
        repo._direct = None
        through_core = keep.repository.read_history(session_id)
        repo._direct = direct
        return through_driver, through_core

    driver_read, core_read = both(fast.id)
    assert driver_read == core_read and "read" in used
    assert [m.seq for m in driver_read[1]] == [1]  # the pinned system message
    assert [m.seq for m in driver_read[2]] == [5, 6, 7, 8]

    fast.close()
    used.clear()
    with pytest.raises(SessionClosed):
        fast.add_user("after the close")
    with pytest.raises(SessionNotFound):
        keep.repository.read_history("no-such-session")
    with pytest.raises(SessionNotFound):
        keep.repository.append_message("no-such-session", Role.USER, "hello")
    assert used == ["append", "read", "append"]  # each refusal from the direct path
    assert_pool_idle(repo.engine, dsn)
    assert snapshot(dsn, fast.id)["session"][8] == 8  # nothing taken by the refusals


def test_statement_listeners_see_every_statement(pg_keep: Callable[..., Chatkeep]) -> None:
    """Tracing hooks on the engine's statement events get the Core path, whose every
    statement they see; once they are gone, the direct path serves again."""
    keep = pg_keep(dispatcher="inline")
    repo = repository_of(keep)
    session = keep.sessions.create(ORG)
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(repo.engine, "before_cursor_execute", record)
    assert not repo._direct.usable
    session.add_user("hello")
    keep.compressor.build_history(session, "You help.")
    assert seen == ["WITH", "SELECT", "SELECT"]
    event.remove(repo.engine, "before_cursor_execute", record)
    assert repo._direct.usable
    session.add_user("again")
    assert seen == ["WITH", "SELECT", "SELECT"]
    assert [m.content for m in session.messages] == ["hello", "again"]


def kill_when_waiting(dsn: str, query_start: str, call: Callable[[], Any],
                      lock: str) -> BaseException | None:
    """Run ``call`` in a thread while ``lock`` (SQL) is held; once its statement (the
    one starting ``query_start``) waits on the lock, terminate its backend. Returns what
    ``call`` raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as admin:
        holder.execute(lock)
        worker = threading.Thread(target=run)
        worker.start()
        deadline = time.monotonic() + 10
        pid = None
        while pid is None and time.monotonic() < deadline:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s", (query_start + "%",)).fetchone()
            pid = row[0] if row else None
            time.sleep(0.01)
        assert pid is not None, f"no backend waited with {query_start!r}"
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        worker.join(10)
        holder.rollback()
    return raised[0] if raised else None


def test_a_backend_killed_under_the_direct_path_is_a_store_error_and_the_pool_recovers(
        pg_url: str, pg_keep: Callable[..., Chatkeep]) -> None:
    keep = pg_keep(dispatcher="inline")
    assert repository_of(keep)._direct.usable
    dsn = pg_dsn(pg_url)
    session = keep.sessions.create(ORG)
    session.add_user("first", metadata={"k": 1})
    session.add_assistant("first answer", usage=Usage(7, 3), model="m")
    before = snapshot(dsn, session.id)

    raised = kill_when_waiting(
        dsn, "WITH claimed", lambda: session.add_assistant("doomed", usage=Usage(9, 9)),
        f"SELECT 1 FROM chat_sessions WHERE id = '{session.id}' FOR UPDATE")
    assert isinstance(raised, StoreError), raised
    assert snapshot(dsn, session.id) == before  # no message, no seq, no usage

    raised = kill_when_waiting(
        dsn, "UPDATE chat_sessions SET summary",
        lambda: keep.repository.compare_and_set_summary(session.id, 0, "doomed", 2),
        f"SELECT 1 FROM chat_sessions WHERE id = '{session.id}' FOR UPDATE")
    assert isinstance(raised, StoreError), raised
    assert snapshot(dsn, session.id) == before  # no summary, no version

    raised = kill_when_waiting(
        dsn, "SELECT chat_sessions.id",
        lambda: keep.compressor.build_history(session, "You help."),
        "LOCK TABLE chat_sessions IN ACCESS EXCLUSIVE MODE")
    assert isinstance(raised, StoreError), raised

    # The dead connections were dropped: the next calls run on fresh ones.
    assert session.add_user("next").seq == 3
    history = keep.compressor.build_history(session, "You help.")
    assert [m["content"] for m in history[1:]] == ["first", "first answer", "next"]
    assert session.refresh().total_tokens == 10
    assert_pool_idle(repository_of(keep).engine, dsn)

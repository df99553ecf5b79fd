"""The driver transport (``chatkeep.store.direct``) on SQLite and PostgreSQL, sync and
async: the store's procedures sent to the driver itself store, read and refuse exactly
what they do through SQLAlchemy Core; Core executors serve while anything listens to
statement events; a backend killed under the driver is a ``StoreError`` that leaves
nothing behind and a usable pool."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Text, cast, create_engine, event, select

from chatkeep import (
    Chatkeep,
    ChatkeepError,
    Ref,
    SessionClosed,
    SessionNotFound,
    StoreError,
    Usage,
)
from chatkeep.messages import MessageDraft, Role
from chatkeep.sessions import prepare_batch
from chatkeep.store import direct
from chatkeep.store.direct import DriverTransport
from chatkeep.store.executor import CoreTransport
from chatkeep.store.schema import chat_messages, chat_sessions, chat_tool_calls, chat_usage
from chatkeep.tokens import HeuristicCounter
from support.aio import open_on_axis
from support.postgres import with_driver

ORG = Ref("organization", 7)
ALICE = Ref("user", 3)
CLOCK = datetime(2026, 11, 5, 9, 30, tzinfo=UTC)


def repository_of(keep: Any) -> Any:
    """The core repository itself (on the async axis, the one inside the bridge)."""
    return getattr(keep, "core", keep).repository


def record_opens(transport: DriverTransport,
                 monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """How each driver connection the transport opens begins (``None``: autocommit),
    here or, for a procedure run whole on aiosqlite, in the driver's thread."""
    opened: list[str | None] = []
    real = transport._open

    def recording(begin: str | None) -> Any:
        opened.append(begin)
        return real(begin)

    transport._open = recording  # type: ignore[method-assign]
    there = direct.InThread._open

    def recording_there(self: direct.InThread, begin: str | None) -> Any:
        opened.append(begin)
        return there(self, begin)

    monkeypatch.setattr(direct.InThread, "_open", recording_there)
    return opened


def stored(url: str, session_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """A session as stored, every column as the database's text (the JSON as written),
    its id and serial ids left out: what both transports must write alike."""
    engine = create_engine(with_driver(url, "psycopg") if url.startswith("postgresql")
                           else url)
    tables = [(chat_sessions, chat_sessions.c.id, [chat_sessions.c.id]),
              (chat_messages, chat_messages.c.session_id, [chat_messages.c.seq]),
              (chat_tool_calls, chat_tool_calls.c.session_id,
               [chat_tool_calls.c.call_seq, chat_tool_calls.c.call_id]),
              (chat_usage, chat_usage.c.session_id, [chat_usage.c.id])]
    out = {}
    try:
        with engine.connect() as conn:
            for table, owner, order in tables:
                columns = [cast(c, Text) for c in table.c if c.name not in ("id", "session_id")]
                rows = conn.execute(select(*columns).where(owner == session_id)
                                    .order_by(*order)).all()
                out[table.name] = [tuple(row) for row in rows]
    finally:
        engine.dispose()
    return out


def write_a_conversation(keep: Any) -> Any:
    """Every kind of append: plain ones, batches, tool calls and their answers, usage."""
    session = keep.sessions.create(ORG, actor=ALICE, metadata={"a": [1, None]})
    session.add_system("Pinned: answer briefly.")
    session.add_user("hi é \u2028 100% %s %(x)s 'quoted' \"double\"", name="alice",
                     metadata={"k": [1, "two"]})
    session.add_assistant("an answer", usage=Usage(3, 4), model="m")
    session.record([{"role": "user", "content": "two at once"},
                    {"role": "assistant", "content": "both stored"}], format="openai_chat")
    session.add_assistant("calling", tool_calls=[
        {"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "c2", "function": {"name": "g"}}], usage=Usage(1, 2), model="m")
    session.record([{"role": "tool", "tool_call_id": "c1", "content": "r1"},
                    {"role": "tool", "tool_call_id": "c2", "content": "r2"},
                    {"role": "assistant", "content": "done"}], format="openai_chat")
    session.add_system("Be brief.")
    keep.repository.append_messages(session.id, prepare_batch(
        [MessageDraft(Role.USER, "batched", usage=Usage(1, 1))], HeuristicCounter()))
    session.add_assistant("retracted")
    session.retract_last()
    return session


def test_the_driver_writes_reads_and_folds_what_core_does(
        db_url: str, make_keep: Callable[..., Chatkeep],
        monkeypatch: pytest.MonkeyPatch) -> None:
    keep = make_keep()
    repo = repository_of(keep)
    driver = repo._transport
    assert isinstance(driver, DriverTransport) and driver.usable
    core = CoreTransport(repo.engine)
    repo.clock = lambda: CLOCK
    opened = record_opens(driver, monkeypatch)

    def through(transport: Any, call: Callable[[], Any]) -> Any:
        repo._transport = transport
        try:
            return call()
        finally:
            repo._transport = driver

    fast = write_a_conversation(keep)
    pg = db_url.startswith("postgresql")
    write = driver.write_begin
    # Each append on the driver (on PostgreSQL a plain one is a single statement), then
    # the session row read again after the retraction (one statement, autocommit).
    assert opened == [None if pg else write] * 4 + [write, write] + \
        [None if pg else write] * 3 + [None]
    slow = through(core, lambda: write_a_conversation(keep))
    assert len(opened) == 10  # the Core transport's appends did not reach the driver
    assert stored(db_url, fast.id) == stored(db_url, slow.id)

    def both(session_id: str) -> Any:
        through_driver = keep.repository.read_history(session_id)
        assert opened[-1] == driver.read_begin
        through_core = through(core, lambda: keep.repository.read_history(session_id))
        assert through_driver == through_core
        return through_driver

    read = both(fast.id)
    assert read[1] == [] and [m.seq for m in read[2]] == list(range(1, 12))

    def fold(session: Any) -> list[Any]:  # a fold's write, then one that lost the race
        version = keep.repository.get_session(session.id).summary_version  # retracted: 1
        return [keep.repository.compare_and_set_summary(session.id, version, "summary", 4),
                keep.repository.compare_and_set_summary(session.id, version, "late", 6)]

    fast_folds = fold(fast)
    assert opened[-2:] == [write, write]
    slow_folds = through(core, lambda: fold(slow))
    assert fast_folds[1] is None and slow_folds[1] is None
    assert dataclasses.replace(fast_folds[0], id="") == dataclasses.replace(slow_folds[0], id="")
    assert stored(db_url, fast.id) == stored(db_url, slow.id)
    read = both(fast.id)
    assert [m.seq for m in read[1]] == [1]  # the pinned system message below the watermark
    assert [m.seq for m in read[2]] == list(range(5, 12))

    fast.close()
    before = stored(db_url, fast.id)
    opened.clear()
    with pytest.raises(SessionClosed):
        fast.add_user("after the close")
    with pytest.raises(SessionNotFound):
        keep.repository.read_history("no-such-session")
    with pytest.raises(SessionNotFound):
        keep.repository.append_messages("no-such-session", prepare_batch(
            [MessageDraft(Role.USER, "hello")], HeuristicCounter()))
    append = None if pg else write
    assert opened == [append, driver.read_begin, append]  # each refusal from the driver
    assert stored(db_url, fast.id) == before  # nothing taken by the refusals


def refusals(keep: Any) -> list[str]:
    """What each wrong append raises, the session's id left out."""
    session = keep.sessions.create(ORG)
    session.add_assistant("calling", tool_calls=[{"id": "c1", "function": {"name": "f"}}])
    attempts: list[Callable[[], Any]] = [
        lambda: session.add_tool_result("c9", "no such call"),
        lambda: keep.repository.append_messages(session.id, prepare_batch(
            [MessageDraft(Role.TOOL, "no call id")], HeuristicCounter())),
        lambda: session.add_tool_result("c1", "answered"),
        lambda: session.add_tool_result("c1", "answered twice"),
        lambda: session.add_assistant("again", tool_calls=[{"id": "c1",
                                                            "function": {"name": "f"}}]),
        lambda: session.close(),
        lambda: session.add_user("closed"),
    ]
    said = []
    for attempt in attempts:
        try:
            attempt()
        except ChatkeepError as exc:
            said.append(f"{type(exc).__name__}: {exc}".replace(session.id, "<id>"))
    return said


def test_the_driver_refuses_what_core_refuses_in_the_same_words(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    repo = repository_of(keep)
    driver = repo._transport
    through_driver = refusals(keep)
    repo._transport = CoreTransport(repo.engine)
    through_core = refusals(keep)
    repo._transport = driver
    assert through_driver == through_core
    assert [line.split(":")[0] for line in through_driver] == [
        "InvalidMessage", "InvalidMessage", "InvalidMessage", "InvalidMessage",
        "SessionClosed"]


# (A built request ends with its replay manifest: the texts it names, then the manifest.)
LISTENED = {"sqlite": ["UPDATE", "INSERT", "SELECT", "SELECT", "INSERT", "INSERT"],
            "postgresql": ["WITH", "SELECT", "SELECT", "WITH"]}
"""The statements of an append and a build (its replay manifest's transaction; on
PostgreSQL one statement that also writes the texts), as statement listeners see them."""


def test_statement_listeners_see_every_statement(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    """Tracing hooks on the engine's statement events get Core executors, whose every
    statement they see; once they are gone, the driver serves again."""
    keep = make_keep()
    repo = repository_of(keep)
    session = keep.sessions.create(ORG)
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split()[0] not in ("BEGIN", "COMMIT"):  # aiosqlite's are statements
            seen.append(statement.split()[0])

    event.listen(repo.engine, "before_cursor_execute", record)
    assert not repo._transport.usable
    session.add_user("hello")
    keep.compressor.build_history(session, "You help.")
    assert seen == LISTENED[repo.engine.dialect.name]
    event.remove(repo.engine, "before_cursor_execute", record)
    assert repo._transport.usable
    session.add_user("again")
    assert seen == LISTENED[repo.engine.dialect.name]
    assert [m.content for m in session.messages] == ["hello", "again"]


def test_sqlite_statements_per_append_and_read(tmp_path: Path) -> None:
    """What SQLite runs: an append is BEGIN IMMEDIATE, the claim, the insert and COMMIT;
    a history read one deferred transaction around two SELECTs."""
    with Chatkeep(f"sqlite:///{tmp_path / 'count.db'}", dispatcher="inline") as keep:
        session = keep.sessions.create(ORG)
        session.add_user("warm-up")
        ran: list[str] = []
        with keep.engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert isinstance(driver, sqlite3.Connection)
            driver.set_trace_callback(lambda sql: ran.append(sql.split()[0]))
        try:
            session.add_user("hello")
            assert ran == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
            ran.clear()
            keep.repository.read_history(session.id)
            assert ran == ["BEGIN", "SELECT", "SELECT", "COMMIT"]
        finally:
            driver.set_trace_callback(None)


# -- PostgreSQL: a backend killed under the driver ------------------------------------------

@pytest.fixture
def pg_keep(pg_schema_url: str, api: str) -> Iterator[Any]:
    """``Chatkeep`` on a fresh PostgreSQL schema, on the ``api`` axis."""
    keep = open_on_axis(pg_schema_url, api, dispatcher="inline")
    yield keep
    keep.close()


def assert_pool_idle(engine: Any, dsn: str) -> None:
    """No connection sits in an open transaction: the pool skips its rollback on checkin
    (chatkeep's PostgreSQL engines), so nothing may ever need it."""
    assert engine.pool._reset_on_return.name == "reset_none"
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE state LIKE "
                            "'idle in transaction%' AND pid <> pg_backend_pid()").fetchone()
    assert row is not None and row[0] == 0


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


@pytest.mark.postgres
def test_a_backend_killed_under_the_driver_is_a_store_error_and_the_pool_recovers(
        pg_schema_url: str, pg_keep: Any) -> None:
    keep = pg_keep
    assert repository_of(keep)._transport.usable
    dsn = with_driver(pg_schema_url, None)
    session = keep.sessions.create(ORG)
    session.add_user("first", metadata={"k": 1})
    session.add_assistant("first answer", usage=Usage(7, 3), model="m")
    session.add_assistant("calling", tool_calls=[{"id": "c1", "function": {"name": "f"}}])
    before = stored(pg_schema_url, session.id)
    row_lock = f"SELECT 1 FROM chat_sessions WHERE id = '{session.id}' FOR UPDATE"

    raised = kill_when_waiting(
        dsn, "WITH claimed", lambda: session.add_assistant("doomed", usage=Usage(9, 9)),
        row_lock)
    assert isinstance(raised, StoreError), raised
    assert stored(pg_schema_url, session.id) == before  # no message, no seq, no usage

    raised = kill_when_waiting(  # an append in a transaction: the answer to a tool call
        dsn, "UPDATE chat_sessions SET total_tokens", lambda: session.add_tool_result("c1", "r"),
        row_lock)
    assert isinstance(raised, StoreError), raised
    assert stored(pg_schema_url, session.id) == before

    raised = kill_when_waiting(
        dsn, "UPDATE chat_sessions SET summary",
        lambda: keep.repository.compare_and_set_summary(session.id, 0, "doomed", 2),
        row_lock)
    assert isinstance(raised, StoreError), raised
    assert stored(pg_schema_url, session.id) == before  # no summary, no version

    raised = kill_when_waiting(  # a read is retried once on a fresh connection
        dsn, "SELECT chat_sessions.id",
        lambda: keep.compressor.build_history(session, "You help."),
        "LOCK TABLE chat_sessions IN ACCESS EXCLUSIVE MODE")
    assert raised is None, raised

    # The dead connections were dropped: the next calls run on fresh ones.
    assert session.add_tool_result("c1", "r").seq == 4
    assert session.add_user("next").seq == 5
    history = keep.compressor.build_history(session, "You help.")
    assert [m["content"] for m in history[1:]][-1] == "next"
    assert session.refresh().total_tokens == 10
    assert_pool_idle(repository_of(keep).engine, dsn)


def test_empty_json_is_read_without_the_parser_as_a_fresh_object_each_time() -> None:
    """``{}``, ``[]`` and ``null`` (most stored metadata, native payloads and tool calls)
    skip the JSON parser, yet each read is its own object; any other text, and SQL NULL,
    decode as the dialect's own decoder does."""
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from chatkeep.store.direct import _bound, _results

    columns = [chat_messages.c.metadata, chat_messages.c.tool_calls, chat_messages.c.content]
    processors = _results(columns, sqlite_dialect.dialect())
    assert [i for i, _ in processors] == [0, 1]  # the text column keeps no processor
    first = _bound(processors, ["{}", "[]", "{}"])
    second = _bound(processors, ["{}", "[]", "{}"])
    assert first == [{}, [], "{}"] and second == first
    assert first[0] is not second[0] and first[1] is not second[1]
    first[0]["k"] = 1
    first[1].append(1)
    assert _bound(processors, ["{}", "[]", None]) == [{}, [], None]
    assert _bound(processors, ['{"a": [1, {}]}', '[{"id": "c"}]', "x"]) == \
        [{"a": [1, {}]}, [{"id": "c"}], "x"]
    assert _bound(processors, [None, None, None]) == [None, None, None]
    assert _bound(processors, ["null", "null", "null"]) == [None, None, "null"]
    assert _bound(processors, ['"{}"', '"null"', "x"]) == ["{}", "null", "x"]


def test_list_lookups_and_bounded_reads_answer_on_the_driver_as_through_core(
        db_url: str, make_keep: Callable[..., Chatkeep],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups that take a list of ids (``IN`` over it: compiled for each count of
    ids, in one statement, or in one read for more than a statement takes) and the reads
    by seq range find on the driver what they find through Core."""
    from chatkeep.store.procedures import MARKS_PER_QUERY

    keep = make_keep()
    repo = repository_of(keep)
    driver = repo._transport
    core = CoreTransport(repo.engine)
    ours = keep.sessions.open("thread-1", ORG)
    theirs = keep.sessions.open("thread-1", Ref("organization", 8))
    for i in range(4):
        ours.add_user(f"ours {i}", metadata={"lc": f"m{i}"})
    theirs.add_user("theirs", metadata={"lc": "m9"})
    ours.add_assistant("calling", tool_calls=[{"id": "c1", "function": {"name": "f"}},
                                              {"id": "c2", "function": {"name": "g"}}])
    ours.add_tool_result("c1", "r1")
    ours.retract_last()
    opened = record_opens(driver, monkeypatch)
    store = keep.repository  # on the async axis, through the bridge

    def asked(transport: Any, ids: list[str]) -> Any:
        repo._transport = transport
        try:
            return (store.stored_marks(ours.id, "lc", ids), store.calls_taken(ours.id, ids),
                    store.marks_elsewhere(ours.id, "thread-1", "lc", ids),
                    [store.read_messages(ours.id, after_seq=a, through_seq=t, limit=n,
                                        live_only=live)
                     for a in (0, 2) for t in (None, 5) for n in (None, 2, 0)
                     for live in (False, True)])
        finally:
            repo._transport = driver

    many = [f"x{i}" for i in range(MARKS_PER_QUERY + 2)] + ["m3", "c2", "m9"]
    for ids in (["m1"], ["m0", "m3", "m9", "c1", "c2", "c3"], many):
        opened.clear()
        found = asked(driver, ids)
        assert found == asked(core, ids)
        assert opened  # the driver served them
    assert found[:3] == ({"m3"}, {"c2"}, {"m9"})
    assert [len(read) for read in found[3][:6]] == [6, 5, 2, 2, 0, 0]  # one retracted
    with pytest.raises(ChatkeepError):
        store.read_messages(ours.id, limit=-1)

"""Faults on PostgreSQL: a backend killed mid-transaction, a summarizer that times out.

The kill is deterministic: a cursor event on the engine calls
``pg_terminate_backend(pid, timeout)`` (which waits until the backend is gone) from a
separate connection, right before or right after one chosen statement of the
transaction. Whatever was written before the kill must vanish with it, the caller
must get a ``StoreError``, and the next call on the same ``Chatkeep`` must succeed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
import psycopg
import pytest
from pg_workers import SYSTEM, RangeSummarizer, backend_pid, compressor, parse_ranges, pg_dsn
from sqlalchemy import Engine, event

from chatkeep import Chatkeep, HistoryCompressor, Ref, StoreError, ToolCall
from chatkeep.config import ChatConfig
from chatkeep.formats.base import unfence
from chatkeep.messages import Usage
from chatkeep.sessions import ChatSession
from chatkeep.testing import FakeOpenAIServer, Reply

pytestmark = pytest.mark.postgres

ORG = Ref("organization", 1)


class Killer:
    """Terminates the backend running the first statement that ``pattern`` matches."""

    def __init__(self, dsn: str, pattern: str) -> None:
        self.dsn = dsn
        self.pattern = re.compile(pattern, re.DOTALL)
        self.killed: int | None = None

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.killed is not None or not self.pattern.match(statement.lstrip()):
            return
        pid = backend_pid(conn.connection.driver_connection)
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            row = admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()
        assert row is not None and row[0] is True
        self.killed = pid


@contextmanager
def kill_backend(engine: Engine, dsn: str, when: str, pattern: str) -> Iterator[Killer]:
    """Kill the backend ``before`` or ``after`` the first statement matching ``pattern``."""
    killer = Killer(dsn, pattern)
    event.listen(engine, f"{when}_cursor_execute", killer)
    try:
        yield killer
    finally:
        event.remove(engine, f"{when}_cursor_execute", killer)
    assert killer.killed is not None, f"no statement matched {pattern!r}"


def snapshot(dsn: str, session_id: str) -> dict[str, Any]:
    """What another client sees committed: the session row, its messages and its usage."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT last_seq, total_tokens, summary, summary_watermark, summary_version, "
            "last_message_at FROM chat_sessions WHERE id = %s", (session_id,)).fetchone()
        seqs = [r[0] for r in conn.execute(
            "SELECT seq FROM chat_messages WHERE session_id = %s ORDER BY seq", (session_id,))]
        usage = conn.execute(
            "SELECT count(*), coalesce(sum(prompt_tokens + completion_tokens), 0) "
            "FROM chat_usage WHERE session_id = %s", (session_id,)).fetchone()
        calls = conn.execute(
            "SELECT count(*) FROM chat_tool_calls WHERE session_id = %s",
            (session_id,)).fetchone()
    assert row is not None and usage is not None and calls is not None
    return {"session": tuple(row), "seqs": seqs, "usage": tuple(usage), "tool_calls": calls[0]}


def seeded(keep: Chatkeep) -> ChatSession:
    session = keep.sessions.create(tenant=ORG)
    session.add_user("first question")
    session.add_assistant("first answer", usage=Usage(7, 3), model="m")
    return session


# Every statement of an append: the seq claim (which returns the session row), the
# insert, the tool-call row, the usage row, and the COMMIT itself (killed right after
# the last insert).
CLAIM = r"UPDATE chat_sessions SET .*last_seq="
APPEND_KILLS = {
    "before-seq-claim": ("before", CLAIM),
    "after-seq-claim": ("after", CLAIM),
    "before-message-insert": ("before", "INSERT INTO chat_messages"),
    "after-message-insert": ("after", "INSERT INTO chat_messages"),
    "after-tool-call-insert": ("after", "INSERT INTO chat_tool_calls"),
    "before-usage-insert": ("before", "INSERT INTO chat_usage"),
    "after-usage-insert": ("after", "INSERT INTO chat_usage"),  # i.e. before COMMIT
}


@pytest.mark.parametrize(("when", "pattern"), list(APPEND_KILLS.values()),
                         ids=list(APPEND_KILLS))
def test_backend_killed_during_append_leaves_nothing(
        pg_url: str, pg_keep: Callable[..., Chatkeep], when: str, pattern: str) -> None:
    keep = pg_keep()
    dsn = pg_dsn(pg_url)
    session = seeded(keep)
    before = snapshot(dsn, session.id)
    row_before = session.row

    with kill_backend(keep.engine, dsn, when, pattern), pytest.raises(StoreError):
        session.add_assistant("doomed", tool_calls=[ToolCall("c1", "lookup")],
                              usage=Usage(100, 50), model="m")

    assert snapshot(dsn, session.id) == before  # no message, no seq bump, no usage, no call
    assert session.row == row_before  # the handle did not adopt a half-written row
    # The same Chatkeep recovers (the dead connection is replaced) and the seq is gapless.
    message = session.add_assistant("next", tool_calls=[ToolCall("c1", "lookup")],
                                    usage=Usage(1, 1), model="m")
    assert message.seq == 3
    assert [m.seq for m in session.messages] == [1, 2, 3]
    assert session.total_tokens == keep.repository.usage_sum(session.id) == 12
    session.add_tool_result("c1", "done")  # the tool call recorded after the kill is live
    assert keep.sessions.get(session.id, tenant=ORG).message_count == 4


def test_backend_killed_during_a_read_is_retried_once(
        pg_url: str, pg_keep: Callable[..., Chatkeep]) -> None:
    """The backend killed as ``build_history`` reads: the read is retried once on a fresh
    connection (issue 22, item 8), so the call succeeds; a write would have failed."""
    keep = pg_keep()
    session = seeded(keep)
    with kill_backend(keep.engine, pg_dsn(pg_url), "before", "SELECT chat_sessions.id"):
        history = compressor(RangeSummarizer()).build_history(session, SYSTEM)
    assert [m["content"] for m in history[1:]] == ["first question", "first answer"]
    history = compressor(RangeSummarizer()).build_history(session, SYSTEM)
    assert [m["content"] for m in history[1:]] == ["first question", "first answer"]


def over_budget(keep: Chatkeep) -> ChatSession:
    session = keep.sessions.create(tenant=ORG)
    for i in range(10):
        session.add_user(f"U{i} " + "question " * 40)
        session.add_assistant(f"A{i} " + "answer " * 40)
    return session


CAS = r"UPDATE chat_sessions SET .*summary_version="


@pytest.mark.parametrize(("when", "pattern"), [("before", CAS), ("after", CAS)],
                         ids=["before-cas", "after-cas"])
def test_backend_killed_during_summary_write_changes_no_summary(
        pg_url: str, pg_keep: Callable[..., Chatkeep], when: str, pattern: str) -> None:
    keep = pg_keep()
    dsn = pg_dsn(pg_url)
    session = over_budget(keep)
    before = snapshot(dsn, session.id)
    summarizer = RangeSummarizer()
    hc = compressor(summarizer)

    with kill_backend(keep.engine, dsn, when, pattern), pytest.raises(StoreError):
        hc.build_history(session, SYSTEM)

    after = snapshot(dsn, session.id)
    # No summary, watermark or version change, no message touched.
    assert after["seqs"] == before["seqs"]
    assert after["session"][2:5] == (None, 0, 0)
    assert after["session"][0] == before["session"][0]
    # The summarizer had answered before the write: its usage was billed in its own
    # transaction (the tokens were spent), and the ledger still equals the counter.
    assert summarizer.calls == 1
    assert after["usage"] == (before["usage"][0] + 1, 15)
    assert after["session"][1] == 15
    assert session.summary is None and session.summary_watermark == 0

    history = hc.build_history(session, SYSTEM)  # the next call compresses normally
    assert session.row.summary_version == 1
    assert parse_ranges(session.summary) == [(1, session.summary_watermark)]
    assert unfence(history[1]["content"]).endswith(f"[1-{session.summary_watermark}]")
    assert session.total_tokens == keep.repository.usage_sum(session.id) == 30
    assert session.add_user("still writable").seq == 21


def test_summarizer_timeout_leaves_the_session_usable(
        pg_keep: Callable[..., Chatkeep]) -> None:
    keep = pg_keep()
    session = over_budget(keep)
    with FakeOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0,
                               timeout=0.5)
        # No back-off after the failed fold (chat.fold_retry_after = 0): this test is about
        # the session being usable and compressible right after.
        hc = HistoryCompressor(client, model="cheap", max_history_tokens=1000,
                               recent_messages_min=4, summary_max_tokens=200,
                               config=ChatConfig(fold_retry_after=0.0))
        server.script(Reply.hang(2.0))
        history = hc.build_history(session, SYSTEM)
        # Everything replays verbatim; nothing stored, nothing billed.
        assert [m["content"].split()[0] for m in history[1:]] == [
            f"{r}{i}" for i in range(10) for r in "UA"]
        session.refresh()
        assert (session.summary, session.summary_watermark, session.row.summary_version) == (
            None, 0, 0)
        assert session.total_tokens == keep.repository.usage_sum(session.id) == 0
        # Writable and compressible right after.
        assert session.add_user("after the timeout").seq == 21
        server.script(Reply.ok("SUMMARY", prompt_tokens=40, completion_tokens=4))
        history = hc.build_history(session, SYSTEM)
        assert unfence(history[1]["content"]).endswith("SUMMARY")
        assert history[-1]["content"] == "after the timeout"
        assert session.row.summary_version == 1 and session.summary_watermark > 0
        assert session.total_tokens == keep.repository.usage_sum(session.id) == 44

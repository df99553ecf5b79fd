"""``store.newest.read_newest_rows``: a session's summary watermark and newest live
messages in one statement, as the end of the session's whole live read (without
``created_at``, ``tokens`` and ``metadata``), on both stores; and under the async API on
SQLite one trip to aiosqlite's thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from chatkeep import Chatkeep, InvalidArgument, Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep
from chatkeep.aio.sessions import core_session
from chatkeep.messages import Message
from support.newest import newest_live

ORG = Ref("organization", 1)
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather",
     "arguments": '{"city": "Oslo"}', "id": "fc_1", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "2C and snowing"},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Cold: 2C, snow.", "annotations": []}]},
    {"role": "user", "content": "And Bergen? Å, ø and ü are fine."},
]


def replayed(message: Message) -> tuple[Any, ...]:
    """What a replay reads of a message."""
    return (message.session_id, message.seq, message.role, message.content,
            message.tool_calls, message.tool_call_id, message.name, dict(message.native))


def tail(repository: Any, session_id: str, limit: int) -> tuple[int, list[Message]]:
    """The reference: the session's watermark and the last ``limit`` of every live
    message, read whole through the repository (no bound)."""
    watermark = repository.get_session(session_id).summary_watermark
    return watermark, repository.read_messages(session_id, live_only=True)[-limit:]


def test_the_newest_live_messages_as_the_whole_read_ends(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        session = keep.sessions.open("newest", ORG)
        other = keep.sessions.open("other", ORG)
        other.record(ITEMS[:1], format="openai_responses")
        session.add_system("Answer in Norwegian.")
        session.record(ITEMS, format="openai_responses")
        session.add_user("retracted")
        session.retract_last()  # kept, never replayed: not read
        session.add_assistant(tool_calls=[{"id": "c2", "function": {"name": "f",
                                                                   "arguments": "{}"}}])
        session.add_tool_result("c2", "done")
        engine = keep.repository.engine
        for limit in (1, 2, 3, 7, 8, 50):
            watermark, messages = newest_live(engine, session.id, limit)
            expected_watermark, expected = tail(keep.repository, session.id, limit)
            assert watermark == expected_watermark == 0
            assert [replayed(m) for m in messages] == [replayed(m) for m in expected]
            assert len(messages) == min(limit, 8)
            assert all(m.created_at is None and not m.metadata for m in messages)
        assert messages[0].role.value == "system"
        assert messages[2].tool_calls[0].id == "c1" and messages[3].tool_call_id == "c1"
        assert messages[1].native["openai_responses"]["item"] == ITEMS[0]
        assert messages[5].native["openai_responses"]["item"] == ITEMS[4]
        assert messages[-2].tool_calls[0].id == "c2" and not messages[-2].native
        row = keep.repository.get_session(session.id)
        assert keep.repository.compare_and_set_summary(session.id, row.summary_version,
                                                       "summary", 3)
        assert newest_live(engine, session.id, 2)[0] == 3


def test_no_live_message_no_session_and_a_bad_limit(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        session = keep.sessions.open("empty", ORG)
        engine = keep.repository.engine
        assert newest_live(engine, session.id, 20) == (0, [])
        session.add_user("only")
        session.retract_last()
        assert newest_live(engine, session.id, 20) == (0, [])
        with pytest.raises(SessionNotFound):
            newest_live(engine, "no-such-session", 20)
        with pytest.raises(InvalidArgument):
            newest_live(engine, session.id, 0)


def test_under_the_async_api_on_sqlite_it_is_one_trip(tmp_path: Path,
                                                      trips: list[str]) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'a.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("one-trip", ORG)
            await session.record(ITEMS, format="openai_responses")
            core = await keep.core()
            chat = core_session(session)
            engine = core.repository.engine
            expected = await keep.run(tail, core.repository, chat.id, 3)
            trips.clear()
            watermark, messages = await keep.run(newest_live, engine, chat.id, 3)
            assert len(trips) == 1, trips
            assert (watermark, [replayed(m) for m in messages]) == \
                (expected[0], [replayed(m) for m in expected[1]])
            trips.clear()
            with pytest.raises(SessionNotFound):
                await keep.run(newest_live, engine, "no-such-session", 3)
            assert len(trips) == 1, trips
        finally:
            await keep.close()

    asyncio.run(main())

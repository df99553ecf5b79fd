"""build_history: budget, summary with watermark, recent messages, tool plumbing, failures."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import openai
import pytest

from chatkeep import Chatkeep, HistoryCompressor, Ref, ToolCall
from chatkeep.formats.base import unfence
from chatkeep.history import SummaryResult
from chatkeep.messages import Message, Usage
from chatkeep.sessions import ChatSession
from chatkeep.store.repository import SessionRow
from chatkeep.testing import FakeOpenAIServer, Reply

# PostgreSQL through PgBouncer in transaction mode too (tests/conftest.py).
pytestmark = pytest.mark.pgbouncer

ORG = Ref("organization", 1)
SYSTEM = "You are a careful legal assistant."


def fill(session: ChatSession, turns: int, words: int = 40, start: int = 0) -> None:
    """``turns`` user/assistant pairs, each message ``words`` words long."""
    for i in range(start, start + turns):
        session.add_user(f"U{i} " + "question " * words)
        session.add_assistant(f"A{i} " + "answer " * words)


def compressor(client: object, **kwargs: object) -> HistoryCompressor:
    opts: dict = {"model": "cheap-model", "max_history_tokens": 1000,
                  "recent_messages_min": 4, "summary_max_tokens": 200}
    opts.update(kwargs)
    return HistoryCompressor(client, **opts)


def contents(history: list[dict[str, str]]) -> list[str]:
    return [m["content"] for m in history]


def test_under_budget_everything_goes_verbatim(keep: Chatkeep,
                                               openai_client: openai.OpenAI,
                                               llm_server: FakeOpenAIServer) -> None:
    s = keep.sessions.create(tenant=ORG)
    fill(s, 3, words=5)
    history = compressor(openai_client).build_history(s, SYSTEM)
    assert history[0] == {"role": "system", "content": SYSTEM}
    assert [m["role"] for m in history[1:]] == ["user", "assistant"] * 3
    assert history[1]["content"].startswith("U0")
    assert llm_server.requests == []
    assert s.summary is None and s.summary_watermark == 0


def test_over_budget_summarizes_stores_watermark_and_reuses_it(
        keep: Chatkeep, openai_client: openai.OpenAI, llm_server: FakeOpenAIServer) -> None:
    s = keep.sessions.create(tenant=ORG)
    fill(s, 10)  # 20 messages of ~80 tokens: ~1650 tokens > 1000
    llm_server.script(Reply.ok("SUMMARY-ONE", prompt_tokens=500, completion_tokens=20))
    hc = compressor(openai_client, language="Spanish")
    history = hc.build_history(s, SYSTEM)

    (request,) = llm_server.requests
    assert request["model"] == "cheap-model"
    assert "Write in Spanish" in request["messages"][0]["content"]
    assert s.summary == "SUMMARY-ONE"
    watermark = s.summary_watermark
    assert 0 < watermark <= 16
    stored = keep.sessions.get_unscoped(s.id)
    assert (stored.summary, stored.summary_watermark) == ("SUMMARY-ONE", watermark)
    # The summarizer saw exactly the folded messages, oldest first.
    folded_text = request["messages"][1]["content"]
    assert "U0 " in folded_text
    assert f"{'U' if watermark % 2 else 'A'}{(watermark - 1) // 2} " in folded_text
    assert unfence(history[1]["content"]).endswith("SUMMARY-ONE")
    replayed = contents(history[2:])
    assert replayed[0].startswith("U" if watermark % 2 == 0 else "A")
    assert history.compressed and not history.over_budget and history.tokens <= 1000
    # Hysteresis: the next turn fits without a new summary.
    s.add_user("short follow-up")
    again = hc.build_history(s, SYSTEM)
    assert len(llm_server.requests) == 1
    assert unfence(again[1]["content"]).endswith("SUMMARY-ONE")
    assert again[-1]["content"] == "short follow-up"

    # Later, only what came after the watermark is folded, with the previous summary.
    fill(s, 8, start=100)
    llm_server.script(Reply.ok("SUMMARY-TWO"))
    hc.build_history(s, SYSTEM)
    second = llm_server.requests[1]["messages"][1]["content"]
    assert "SUMMARY-ONE" in second
    next_after_watermark = s.messages_after(watermark)[0].content or ""
    assert "U0 " not in second
    assert next_after_watermark.split()[0] + " " in second
    assert s.summary == "SUMMARY-TWO" and s.summary_watermark > watermark
    assert s.row.summary_version == 2


def test_no_message_is_lost_between_summary_and_replay(keep: Chatkeep) -> None:
    """Every replayable message is either folded (seq <= watermark) or replayed."""
    s = keep.sessions.create(tenant=ORG)
    hc = compressor(None, max_history_tokens=600, summary_max_tokens=100)
    for i in range(30):
        s.add_user(f"U{i} " + "word " * 30)
        s.add_assistant(tool_calls=[ToolCall(f"c{i}", "f")])
        s.add_tool_result(f"c{i}", "tool output " * 10)
        s.add_assistant(f"A{i} " + "word " * 30)
        history = hc.build_history(s, SYSTEM)
        replayed = {m["content"].split()[0] for m in history[1:] if m["role"] != "system"}
        texts = [m for m in s.messages if m.replay_text]
        for m in texts:
            assert m.seq <= s.summary_watermark or m.replay_text.split()[0] in replayed
    assert s.summary_watermark > 0
    assert len(s.messages) == 120  # compression never deletes


def test_recent_messages_always_verbatim(keep: Chatkeep, openai_client: openai.OpenAI,
                                         llm_server: FakeOpenAIServer) -> None:
    s = keep.sessions.create(tenant=ORG)
    fill(s, 3, words=400)  # each message alone is ~400 tokens; budget 1000
    llm_server.script(Reply.ok("S"))
    history = compressor(openai_client, recent_messages_min=4).build_history(s, SYSTEM)
    replayed = contents(history)[2:]
    assert [t[:2] for t in replayed] == ["U1", "A1", "U2", "A2"]
    # Even when the recent messages alone are over budget, nothing recent is folded.
    s2 = keep.sessions.create(tenant=ORG)
    fill(s2, 2, words=400)
    history2 = compressor(openai_client, recent_messages_min=4).build_history(s2, SYSTEM)
    assert [t[:2] for t in contents(history2)[1:]] == ["U0", "A0", "U1", "A1"]
    assert len(llm_server.requests) == 1


def test_tool_plumbing_is_never_replayed_or_summarized(
        keep: Chatkeep, openai_client: openai.OpenAI, llm_server: FakeOpenAIServer) -> None:
    s = keep.sessions.create(tenant=ORG)
    for i in range(8):
        s.add_user(f"U{i} " + "please check " * 30)
        s.add_assistant(f"Checking {i}.", tool_calls=[
            ToolCall(f"call_{i}", "secret_lookup", json.dumps({"q": f"ARGS{i}"}))])
        s.add_tool_result(f"call_{i}", f"TOOLRESULT{i} " * 20)
        s.add_assistant(tool_calls=[ToolCall(f"call_{i}b", "second_lookup")])
        s.add_tool_result(f"call_{i}b", f"TOOLRESULT{i}b")
        s.add_assistant(f"A{i} " + "found it " * 30)
    llm_server.script(Reply.ok("S1"))
    history = compressor(openai_client).build_history(s, SYSTEM)
    assert all(m["role"] in ("system", "user", "assistant") for m in history)
    assert all(set(m) == {"role", "content"} for m in history)
    assert not any("TOOLRESULT" in m["content"] or "ARGS" in m["content"] for m in history)
    assert "Checking 7." in contents(history)  # text of a text+tool-calls turn replays
    body = llm_server.bodies()[0]
    assert "TOOLRESULT" not in body and "ARGS" not in body and "secret_lookup" not in body
    assert "Checking 0." in body


def test_token_counter_is_pluggable(keep: Chatkeep) -> None:
    class WordCounter:
        def count(self, text: str) -> int:
            return len(text.split())

    s = keep.sessions.create(tenant=ORG)
    fill(s, 4, words=50)  # ~200 chars/message = ~50 tokens heuristic... 50 words
    hc = compressor(None, counter=WordCounter(), max_history_tokens=1000)
    assert hc.build_history(s, SYSTEM)[1]["content"].startswith("U0")  # 400 words fit
    hc_small = compressor(None, counter=WordCounter(), max_history_tokens=300,
                          summary_max_tokens=60)
    hc_small.build_history(s, SYSTEM)
    assert s.summary_watermark > 0


@pytest.mark.parametrize("failure", [
    Reply.error(500), Reply.error(429, "rate limited"), Reply.garbage(), Reply.hang(3.0),
    Reply.ok("   "), Reply.ok("word " * 5000),
], ids=["http500", "http429", "garbage", "timeout", "empty", "runaway"])
def test_failing_summarizer_keeps_previous_summary_and_replays(
        keep: Chatkeep, llm_server: FakeOpenAIServer, failure: Reply,
        caplog: pytest.LogCaptureFixture) -> None:
    client = openai.OpenAI(base_url=llm_server.base_url, api_key="k", max_retries=0,
                           timeout=1.0)
    s = keep.sessions.create(tenant=ORG)
    fill(s, 10)
    hc = compressor(client)
    llm_server.script(Reply.ok("GOOD SUMMARY"))
    hc.build_history(s, SYSTEM)
    old_watermark = s.summary_watermark
    fill(s, 10, start=50)
    before = [m.seq for m in s.messages]

    llm_server.script(failure)
    history = hc.build_history(s, SYSTEM)  # must not raise
    assert "summarizer failed" in caplog.text
    assert s.refresh().summary == "GOOD SUMMARY"
    assert s.summary_watermark == old_watermark
    assert unfence(history[1]["content"]).endswith("GOOD SUMMARY")
    expected = [m.content for m in s.messages_after(old_watermark) if m.replay_text]
    assert contents(history[2:]) == expected
    assert [m.seq for m in s.messages] == before


class HoldingSummarizer:
    """Holds its first call until released, so a second caller arrives mid-fold."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        self.calls += 1
        self.entered.set()
        self.release.wait(10)
        first, last = messages[0].seq, messages[-1].seq
        return SummaryResult(f"{previous or ''}[{first}-{last}]", Usage(10, 5), "cheap")


def test_a_caller_arriving_mid_fold_does_not_pay_for_it_again(make_keep) -> None:
    """The fold's claim (a lease): the second caller replays the stored state instead of
    calling the summarizer for the same step (issue 22: lost races were billed)."""
    keep = make_keep()
    s = keep.sessions.create(tenant=ORG)
    fill(s, 12)
    summarizer = HoldingSummarizer()
    hc = compressor(summarizer)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(
        hc.build_history(keep.sessions.get_unscoped(s.id), SYSTEM)))
    first.start()
    assert summarizer.entered.wait(10)
    second = hc.build_history(keep.sessions.get_unscoped(s.id), SYSTEM)
    assert second.info.fold_deferred == "another caller is folding this session"
    assert not second.info.compressed and second.over_budget
    assert [m["content"] for m in second[1:]] == [m.content for m in s.messages]
    summarizer.release.set()
    first.join()
    assert results[0].info.compressed
    s.refresh()
    assert summarizer.calls == 1 and s.row.summary_version == 1
    assert s.row.fold_lease_until is None  # the stored fold gave the claim back
    assert keep.repository.usage_sum(s.id) == 15 == s.total_tokens
    third = hc.build_history(s, SYSTEM)  # the next caller renders the stored summary
    assert unfence(third[1]["content"]).endswith("]") and summarizer.calls == 1


def test_summary_usage_is_billed_to_the_tenant(keep: Chatkeep, openai_client: openai.OpenAI,
                                               llm_server: FakeOpenAIServer) -> None:
    s = keep.sessions.create(tenant=Ref("organization", "acme"), actor=Ref("user", 1))
    fill(s, 10)
    llm_server.script(Reply.ok("S", prompt_tokens=700, completion_tokens=40))
    compressor(openai_client).build_history(s, SYSTEM)
    (line,) = keep.usage(Ref("organization", "acme"))
    assert (line.purpose, line.prompt_tokens, line.completion_tokens) == ("summary", 700, 40)
    assert s.total_tokens == 740


@pytest.mark.sync_api  # replaces a repository method with a spy
def test_build_history_reads_only_after_the_watermark(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    hc = compressor(None, max_history_tokens=600, summary_max_tokens=100)
    fill(s, 20)
    hc.build_history(s, SYSTEM)
    watermark = s.summary_watermark
    assert watermark > 0
    seen: list[int] = []
    original = s.repository.read_history

    def spy(session_id: str) -> tuple[SessionRow, list[Message], list[Message]]:
        row, pinned, messages = original(session_id)
        seen.append(row.summary_watermark)
        assert pinned == [] and all(m.seq > row.summary_watermark for m in messages)
        assert len(messages) < 40  # the tail, not the session
        return row, pinned, messages

    s.repository.read_history = spy  # type: ignore[method-assign]
    hc.build_history(s, SYSTEM)
    assert seen == [watermark]


def test_memories_go_into_the_system_message(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("hi")
    history = compressor(None).build_history(s, SYSTEM, memories=["Prefers Spanish"])
    assert history[0]["content"].startswith(SYSTEM)
    assert "- Prefers Spanish" in history[0]["content"]


def test_a_message_carrying_other_text_is_replace_with_those_fields() -> None:
    # ``carrying`` builds the outgoing copy directly; every other field must come along,
    # including any field added to Message later.
    import dataclasses
    from datetime import UTC, datetime

    from chatkeep.messages import Role

    stamp = datetime(2026, 12, 3, tzinfo=UTC)
    values = {f.name: f"<{f.name}>" for f in dataclasses.fields(Message)}
    values.update(seq=4, role=Role.ASSISTANT, tool_calls=(ToolCall("c1", "f"),), tokens=9,
                  created_at=stamp, metadata={"k": 1}, native={"x": {"item": 1}},
                  retracted_at=stamp)
    message = Message(**values)
    assert message.carrying("new", (), {"y": 2}) == dataclasses.replace(
        message, content="new", tool_calls=(), native={"y": 2})

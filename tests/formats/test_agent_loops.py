"""The agent loop every application writes, in each wire format, against strict local
fakes of the hosted APIs (the real openai and anthropic SDKs on the wire): single and
parallel tool calls, reasoning and signed thinking handed back, across a compression."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.testing import AgentModel, FakeAnthropicServer, FakeOpenAIServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import agent_loop

ORG = Ref("organization", 1)
QUESTIONS = [
    ("What is the weather in Paris?", ["18C and sunny"]),
    ("What is the weather in Rome, Oslo and Paris?", ["24C", "2C", "18C"]),
    ("Thanks! Anything else I should know?", ["echo"]),
]
SMALL_BUDGET = {"chat": {"max_history_tokens": 260, "recent_messages_min": 2,
                         "summary_max_tokens": 40}}


class Harness:
    """One API's fake server, its SDK client, and the example loop for it."""

    def __init__(self, api: str, thinking: bool = False,
                 model: AgentModel | None = None) -> None:
        self.model = model or AgentModel(reasoning=True if api == "responses" else None)
        self.api, self.thinking = api, thinking
        if api == "anthropic":
            self.server: Any = FakeAnthropicServer(responder=self.model.anthropic)
        else:
            self.server = FakeOpenAIServer(responder=self.model.openai)

    def __enter__(self) -> Harness:
        self.server.start()
        if self.api == "anthropic":
            self.client: Any = anthropic.Anthropic(base_url=self.server.base_url,
                                                   api_key="k", max_retries=0)
        else:
            self.client = openai.OpenAI(base_url=self.server.base_url, api_key="k",
                                        max_retries=0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def ask(self, keep: Chatkeep, session: Any, question: str) -> str:
        if self.api == "chat":
            return agent_loop.chat_turn(keep, session, self.client, "gpt-x", question)
        if self.api == "responses":
            return agent_loop.responses_turn(keep, session, self.client, "o-x", question)
        return agent_loop.anthropic_turn(keep, session, self.client, "claude-x", question,
                                         thinking=self.thinking)


APIS = [("chat", False), ("responses", False), ("anthropic", False), ("anthropic", True)]
IDS = ["openai_chat", "openai_responses", "anthropic", "anthropic_thinking"]


@pytest.fixture(params=APIS, ids=IDS)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with Harness(*request.param) as h:
        yield h


def test_multi_turn_agent_loop_with_single_and_parallel_calls(
        make_keep: Callable[..., Chatkeep], harness: Harness) -> None:
    keep = make_keep()
    session = keep.sessions.create(tenant=ORG, actor=Ref("user", 1))
    for question, expected in QUESTIONS:
        answer = harness.ask(keep, session, question)
        assert all(fragment in answer for fragment in expected), answer
    assert harness.server.rejected == []
    # One call for Paris, then three in parallel; each answered once, nothing repeated.
    calls = [c for m in session.messages for c in m.tool_calls]
    assert len(calls) == 4
    assert [m.role.value for m in session.messages].count("tool") == 4
    if harness.api == "responses":
        # Reasoning came back verbatim (the fake verifies its encrypted_content).
        assert any("reasoning" in m.native.get("openai_responses", {})
                   for m in session.messages)
    if harness.thinking:
        assert any(m.native.get("anthropic_messages", {}).get("thinking")
                   for m in session.messages)


def test_agent_loop_keeps_working_across_compressions(
        make_keep: Callable[..., Chatkeep], harness: Harness) -> None:
    keep = make_keep(config=SMALL_BUDGET)
    session = keep.sessions.create(tenant=ORG)
    for round_ in range(6):
        for question, expected in QUESTIONS[:2]:
            answer = harness.ask(keep, session, f"({round_}) {question}")
            assert all(fragment in answer for fragment in expected), answer
    assert session.refresh().summary_watermark > 0
    assert harness.server.rejected == []
    # Compression folded closed turns only: no tool plumbing reached the summary.
    assert "get_weather" not in (session.summary or "")


def test_a_conversation_recorded_in_one_api_continues_in_another(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    session = keep.sessions.create(tenant=ORG)
    model = AgentModel(reasoning=True)  # one model: call ids stay unique, as a provider's do
    with Harness("anthropic", thinking=True, model=model) as first:
        first.ask(keep, session, "What is the weather in Paris and Rome?")
    for api in ("chat", "responses"):
        with Harness(api, model=model) as then:
            answer = then.ask(keep, session, "What is the weather in Oslo?")
            assert "2C" in answer and then.server.rejected == []


def test_the_fake_rejects_what_the_old_replay_would_have_sent(
        make_keep: Callable[..., Chatkeep]) -> None:
    """The strict fake is what makes these tests mean something: a history that drops the
    open turn's result (as the old replay did) is a 400 from it, as from the real API."""
    keep = make_keep()
    session = keep.sessions.create(tenant=ORG)
    with Harness("chat") as h:
        agent_loop.chat_turn(keep, session, h.client, "gpt-x",
                             "What is the weather in Paris?")
        history = keep.compressor.build_history(session, agent_loop.SYSTEM)
        orphan = [*history, {"role": "tool", "tool_call_id": "nope", "content": "x"}]
        with pytest.raises(openai.BadRequestError):
            h.client.chat.completions.create(model="gpt-x", messages=orphan)

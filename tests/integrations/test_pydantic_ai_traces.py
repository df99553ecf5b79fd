"""Pydantic AI's own instrumentation on a redacting conversation (issue 30: nothing raw in
any framework's traces). Its spans record the run's messages when content is on, and
Pydantic AI holds the user's prompt raw (chatkeep scrubs each request as it leaves), so a
run that would record content on a conversation that redacts is refused before its prompt
joins those messages; with content off its spans carry no raw value; a conversation that
does not redact runs as instrumented."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from chatkeep import PrivacyError, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore, ChatkeepHistory
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 302)
EMAIL = "ana.garcia@example.com"
RAW = [EMAIL, "ana.garcia"]


def run_instrumented(db_url: str, *, content: bool, redact: bool = True
                     ) -> tuple[Any, FakeOpenAIServer, list[str]]:
    """One run with Pydantic AI's instrumentation into an in-memory exporter: its output
    (or the exception), the fake server, and every span's attributes as JSON."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = FakeOpenAIServer(responder=lambda body: Reply.ok(
        "I will write to <EMAIL_1> today." if redact else f"I will write to {EMAIL} today."))

    async def scenario() -> Any:
        model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.base_url,
                                                                 api_key="k"))
        async with AsyncChatkeep(db_url, config={"privacy": {"anonymize_pii": True}},
                                 dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG, anonymize_pii=redact)
            agent: Agent[Any, Any] = Agent(model, capabilities=[ChatkeepHistory(store)])
            agent.instrument = InstrumentationSettings(include_content=content,
                                                       tracer_provider=provider)
            try:
                result = await agent.run(f"My mail is {EMAIL}, please confirm.",
                                         conversation_id="ticket-1")
            except PrivacyError as exc:
                return exc
            return result.output

    with server:
        outcome = asyncio.run(scenario())
    spans = [json.dumps(dict(s.attributes), default=str) for s in exporter.get_finished_spans()]
    return outcome, server, spans


def test_content_recording_on_a_redacting_conversation_is_refused_with_nothing_sent(
        db_url: str) -> None:
    outcome, server, spans = run_instrumented(db_url, content=True)
    assert isinstance(outcome, PrivacyError)
    assert "include_content=False" in str(outcome)
    assert server.requests == []
    assert all(raw not in span for span in spans for raw in RAW)


def test_without_content_the_spans_carry_no_raw_value(db_url: str) -> None:
    outcome, server, spans = run_instrumented(db_url, content=False)
    assert outcome == f"I will write to {EMAIL} today."  # the user's value, restored
    assert len(server.requests) == 1 and spans
    for body in server.bodies():
        assert all(raw not in body for raw in RAW)
    for span in spans:
        assert all(raw not in span for raw in RAW), span


@pytest.mark.parametrize("content", [True, False])
def test_a_conversation_that_does_not_redact_runs_as_instrumented(db_url: str,
                                                                  content: bool) -> None:
    outcome, server, spans = run_instrumented(db_url, content=content, redact=False)
    assert outcome == f"I will write to {EMAIL} today."
    assert len(server.requests) == 1
    assert any(EMAIL in span for span in spans) is content

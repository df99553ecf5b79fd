"""A framework's model call that chatkeep is in the path of gets a ``chat {model}`` span
with the GenAI attributes and metrics chatkeep's own calls have, and none when
OpenTelemetry is off (``observability/framework_calls.py``)."""

from __future__ import annotations

import pytest
from otel_helpers import Telemetry, World

from chatkeep import Ref
from chatkeep.observability import capture, metrics
from chatkeep.observability import framework_calls as calls

ORG = Ref("organization", 34)


def test_a_framework_call_is_a_chat_span_with_the_conventions_attributes(
        telemetry: Telemetry) -> None:
    def summed() -> int:
        return sum(int(p.sum) for p in telemetry.points("gen_ai.client.token.usage")
                   if dict(p.attributes).get("chatkeep.tenant") == "organization:34"
                   and dict(p.attributes).get("gen_ai.request.model") == "gpt-x")

    before = summed()
    with calls.model_call(ORG, "s-1", model="gpt-x", provider="openai",
                          framework="openai_agents", max_tokens=256) as record:
        record.usage(120, 30, "gpt-x-2026")
    (span,) = telemetry.named("chat gpt-x")
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-x"
    assert attrs["gen_ai.response.model"] == "gpt-x-2026"
    assert attrs["gen_ai.request.max_tokens"] == 256
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (120, 30)
    assert attrs["gen_ai.conversation.id"] == "s-1"
    assert attrs["chatkeep.tenant"] == "organization:34"
    assert attrs["chatkeep.purpose"] == "chat"
    assert attrs["chatkeep.framework"] == "openai_agents"
    assert span.kind.name == "CLIENT"
    assert "gen_ai.input.messages" not in attrs  # capture is off by default
    assert summed() == before + 150  # 120 in, 30 out, on the tenant's series


def test_a_failed_call_marks_the_error_and_raises_on(telemetry: Telemetry) -> None:
    with pytest.raises(ConnectionError), \
            calls.model_call(ORG, "s-2", model="m", provider="anthropic", framework="langchain"):
        raise ConnectionError("refused")
    (span,) = telemetry.named("chat m")
    assert span.attributes["error.type"] == "ConnectionError"
    assert "gen_ai.usage.input_tokens" not in span.attributes


def test_content_is_captured_only_when_asked_and_only_as_given(telemetry: Telemetry) -> None:
    body = [{"role": "user", "content": "mail <EMAIL_1>"}]
    capture.configure(capture_content=True)
    try:
        with calls.model_call(ORG, "s-3", model="m3", provider="openai",
                              framework="pydantic_ai", body=body):
            pass
    finally:
        capture.configure(capture_content=False)
    (span,) = telemetry.named("chat m3")
    assert "<EMAIL_1>" in span.attributes["gen_ai.input.messages"]


def test_without_opentelemetry_nothing_is_recorded(telemetry: Telemetry,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "ON", False)
    with calls.model_call(ORG, "s-4", model="m4", provider="openai",
                          framework="langchain") as record:
        record.usage(1, 2)
    assert telemetry.named("chat m4") == []
    assert (record.input_tokens, record.output_tokens) == (1, 2)


def test_a_recall_is_a_search_memory_span_with_ids_and_no_text(world: World,
                                                               telemetry: Telemetry) -> None:
    keep = world.keep
    keep.memory.add(ORG, "prefers invoices by post")
    session = keep.sessions.open("otel-recall", tenant=ORG)
    found = keep.memory.recall(session, query="invoices")
    (span,) = telemetry.named("search_memory chatkeep.memories")
    assert span.attributes["gen_ai.conversation.id"] == session.id
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "search_memory"
    assert attrs["gen_ai.memory.store.id"] == "chatkeep.memories"
    assert attrs["chatkeep.memory.found"] == len(found) >= 1
    assert list(attrs["chatkeep.memory.ids"]) == [str(m.id) for m in found]
    assert "invoices" not in repr(attrs)


def test_metric_series_never_carry_a_session_id(telemetry: Telemetry) -> None:
    """A series per conversation would exhaust the SDK's attribute sets (its cardinality
    limit) and any backend's: metrics are by tenant and purpose, spans carry the session."""
    for n in range(3):
        with calls.model_call(ORG, f"s-many-{n}", model="gpt-card", provider="openai",
                              framework="langchain") as record:
            record.usage(10, 1)
    series = [dict(p.attributes) for name in ("gen_ai.client.token.usage",
                                              "gen_ai.client.operation.duration")
              for p in telemetry.points(name)
              if dict(p.attributes).get("gen_ai.request.model") == "gpt-card"]
    assert series and all("chatkeep.session.id" not in labels for labels in series)
    assert len({tuple(sorted(labels.items())) for labels in series}) == 3  # in, out, time

"""Spans and metrics, attribute by attribute against the GenAI semantic conventions, read
from the SDK's in-memory exporter and metric reader."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_helpers import Telemetry, World

from chatkeep import Chatkeep, Config, Ref
from chatkeep.errors import ConfigError
from chatkeep.observability import (
    capture_enabled,
    configure,
    record_quota_refusal,
    record_store_duration,
)
from chatkeep.sessions import ChatSession
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 7)
ACTOR = Ref("user", 3)
FILLER = "More detail about the request follows here. " * 10


def _turns(world: World, n: int = 6, tenant: Ref = ORG) -> ChatSession:
    session = world.keep.sessions.create(tenant, ACTOR)
    for i in range(n):
        session.add_user(f"Question {i}: write to ana.garcia@example.com. {FILLER}")
        session.add_assistant(f"Answer {i}. {FILLER}")
    session.add_user("And now?")
    return session


def test_a_turn_that_folds_is_one_tree_of_convention_spans(world: World,
                                                           telemetry: Telemetry) -> None:
    session = _turns(world)
    session_id = session.id
    history = world.keep.compressor.build_history(session, "You help.")
    assert history.info.compressed

    (build,) = telemetry.named("chatkeep.build_history")
    attrs = dict(build.attributes)
    assert attrs["gen_ai.conversation.id"] == session_id
    assert attrs["chatkeep.session.id"] == session_id
    assert attrs["chatkeep.tenant"] == "organization:7"
    assert attrs["chatkeep.purpose"] == "chat"
    assert attrs["chatkeep.history.format"] == "openai_chat"
    assert attrs["chatkeep.history.messages_out"] == len(history)
    # What the last plan read: the messages after the watermark the fold moved.
    assert attrs["chatkeep.history.messages_in"] == 13 - session.refresh().row.summary_watermark
    assert attrs["chatkeep.history.tokens"] == history.info.tokens
    assert attrs["chatkeep.history.budget"] == 500
    assert attrs["chatkeep.history.folded"] is True
    assert attrs["chatkeep.history.summary_failed"] is False
    assert attrs["chatkeep.summary.version"] == session.refresh().row.summary_version >= 1
    assert attrs["chatkeep.summary.watermark"] == session.row.summary_watermark > 0
    # The e-mail goes out as a placeholder: counted, never named.
    assert attrs["chatkeep.privacy.redactions"] >= 1
    assert build.kind == SpanKind.INTERNAL

    (fold,) = telemetry.named("update_memory chatkeep.summary")
    fattrs = dict(fold.attributes)
    assert fold.parent.span_id == build.context.span_id
    assert fattrs["gen_ai.operation.name"] == "update_memory"
    assert fattrs["gen_ai.memory.store.id"] == "chatkeep.summary"
    assert fattrs["chatkeep.purpose"] == "summary"
    assert fattrs["chatkeep.fold.outcome"] == "folded"
    assert fattrs["chatkeep.fold.calls"] >= 1
    assert fattrs["chatkeep.fold.messages"] > 0

    chats = [s for s in telemetry.spans() if s.name == "chat gpt-4o-mini"]
    summary_calls = [s for s in chats if s.parent and s.parent.span_id == fold.context.span_id]
    assert len(summary_calls) == fattrs["chatkeep.fold.calls"]
    call = summary_calls[0]
    cattrs = dict(call.attributes)
    assert call.kind == SpanKind.CLIENT
    assert call.status.status_code != StatusCode.ERROR
    assert cattrs["gen_ai.operation.name"] == "chat"
    assert cattrs["gen_ai.provider.name"] == "openai"
    assert cattrs["gen_ai.request.model"] == "gpt-4o-mini"
    assert isinstance(cattrs["gen_ai.response.model"], str)
    assert cattrs["gen_ai.usage.input_tokens"] > 0
    assert cattrs["gen_ai.usage.output_tokens"] > 0
    assert cattrs["chatkeep.purpose"] == "summary"
    assert cattrs["chatkeep.tenant"] == "organization:7"
    assert cattrs["gen_ai.conversation.id"] == session_id
    assert "gen_ai.input.messages" not in cattrs  # capture is off by default
    assert fattrs["gen_ai.usage.input_tokens"] == sum(
        dict(s.attributes)["gen_ai.usage.input_tokens"] for s in summary_calls)

    # The distillation the fold dispatched (inline): its span and its model calls.
    (distil,) = telemetry.named("update_memory chatkeep.memories")
    dattrs = dict(distil.attributes)
    assert dattrs["gen_ai.operation.name"] == "update_memory"
    assert dattrs["gen_ai.memory.store.id"] == "chatkeep.memories"
    assert dattrs["chatkeep.purpose"] == "distil"
    assert dattrs["chatkeep.memory.added"] == len(dattrs["chatkeep.memory.ids"]) >= 1
    distil_calls = [s for s in chats if s.parent and s.parent.span_id == distil.context.span_id]
    assert distil_calls and all(dict(s.attributes)["chatkeep.purpose"] == "distil"
                                and dict(s.attributes)["gen_ai.output.type"] == "json"
                                for s in distil_calls)

    embeds = telemetry.named("embeddings fake-embed")
    assert embeds
    eattrs = dict(embeds[0].attributes)
    assert embeds[0].kind == SpanKind.CLIENT
    assert eattrs["gen_ai.operation.name"] == "embeddings"
    assert eattrs["gen_ai.request.model"] == "fake-embed"
    assert eattrs["gen_ai.provider.name"] == "openai"
    assert eattrs["gen_ai.embeddings.dimension.count"] == 64


def test_metrics_follow_the_conventions_by_tenant_and_purpose(world: World,
                                                              telemetry: Telemetry) -> None:
    session = _turns(world, tenant=Ref("organization", 80808))  # its own metric series
    before = {name: _totals(telemetry, name) for name in
              ("chatkeep.folds", "chatkeep.quota.refused", "chatkeep.store.duration")}
    world.keep.compressor.build_history(session, "You help.")
    record_quota_refusal("organization:80808", "summary")
    record_store_duration("compare_and_set", 0.002)

    usage = [p for p in telemetry.points("gen_ai.client.token.usage")
             if dict(p.attributes).get("chatkeep.tenant") == "organization:80808"]
    assert usage
    labels = [dict(p.attributes) for p in usage]
    summary_input = [p for p, lab in zip(usage, labels, strict=True)
                     if lab["chatkeep.purpose"] == "summary"
                     and lab["gen_ai.token.type"] == "input"]
    assert summary_input and summary_input[0].sum > 0
    for lab in labels:
        assert lab["gen_ai.operation.name"] == "chat"
        assert lab["gen_ai.provider.name"] == "openai"
        assert lab["gen_ai.request.model"] == "gpt-4o-mini"
        assert lab["gen_ai.token.type"] in ("input", "output")
        assert lab["chatkeep.tenant"] == "organization:80808"
        assert lab["chatkeep.purpose"] in ("summary", "distil")
    assert {lab["chatkeep.purpose"] for lab in labels} == {"summary", "distil"}

    durations = [p for p in telemetry.points("gen_ai.client.operation.duration")
                 if dict(p.attributes).get("chatkeep.tenant") == "organization:80808"]
    operations = {dict(p.attributes)["gen_ai.operation.name"] for p in durations}
    assert operations == {"chat", "embeddings"}
    assert all(p.count >= 1 and p.sum >= 0 for p in durations)

    def grew(name: str) -> dict[tuple[tuple[str, str], ...], int]:
        now, then = _totals(telemetry, name), before[name]
        return {k: v - then.get(k, 0) for k, v in now.items() if v != then.get(k, 0)}

    assert grew("chatkeep.folds") == {
        (("chatkeep.fold.outcome", "folded"), ("chatkeep.tenant", "organization:80808")): 1}
    assert grew("chatkeep.quota.refused") == {
        (("chatkeep.purpose", "summary"), ("chatkeep.tenant", "organization:80808")): 1}
    store = grew("chatkeep.store.duration")
    assert store[(("chatkeep.store.operation", "read_history"),)] >= 2  # plan, fold, plan
    assert store[(("chatkeep.store.operation", "compare_and_set"),)] == 1


def _totals(telemetry: Telemetry, metric: str) -> dict[tuple[tuple[str, str], ...], int]:
    """Each series of ``metric`` (its sorted labels) -> its count (histogram) or value."""
    return {tuple(sorted(dict(p.attributes).items())): int(getattr(p, "count", None)
            or getattr(p, "value", 0) or 0) for p in telemetry.points(metric)}


def test_a_failed_model_call_is_an_error_span_with_its_type(world: World,
                                                            telemetry: Telemetry) -> None:
    session = _turns(world)
    world.server.stop()  # the summarizer cannot reach its model: the fold fails
    history = world.keep.compressor.build_history(session, "You help.")
    assert history.info.summary_failed
    (call,) = [s for s in telemetry.spans() if s.name == "chat gpt-4o-mini"]
    assert call.status.status_code == StatusCode.ERROR
    assert dict(call.attributes)["error.type"]
    (fold,) = telemetry.named("update_memory chatkeep.summary")
    assert dict(fold.attributes)["chatkeep.fold.outcome"] == "failed"
    assert dict(telemetry.named("chatkeep.build_history")[0].attributes)[
        "chatkeep.history.summary_failed"] is True


def test_content_capture_is_a_config_switch(tmp_path: Path, telemetry: Telemetry) -> None:
    with pytest.raises(ConfigError, match=r"observability\.capture_content"):
        Config.from_dict({"observability": {"capture_content": "maybe"}})
    assert Config().observability.capture_content is False
    assert not capture_enabled()
    server = FakeOpenAIServer(responder=lambda body: Reply.ok("A summary.")).start()
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        keep = Chatkeep(f"sqlite:///{tmp_path / 'c.db'}", model=client, dispatcher="inline",
                        config={"chat": {"max_history_tokens": 500, "recent_messages_min": 1},
                                "memory": {"distil_on_compress": False},
                                "observability": {"capture_content": True}})
        assert capture_enabled()
        session = keep.sessions.create(ORG, ACTOR)
        for i in range(6):
            session.add_user(f"Question {i}. {FILLER}")
            session.add_assistant(f"Answer {i}. {FILLER}")
        session.add_user("And now?")
        assert keep.compressor.build_history(session, "You help.").info.compressed
        keep.close()
    finally:
        server.stop()
        configure(capture_content=False)
    (call,) = [s for s in telemetry.spans() if s.name == "chat gpt-4o-mini"]
    captured = json.loads(dict(call.attributes)["gen_ai.input.messages"])
    assert captured[0]["role"] == "system"
    assert any("Question 0." in part["content"] for m in captured for part in m["parts"])


def test_the_async_api_makes_the_same_tree(tmp_path: Path, telemetry: Telemetry) -> None:
    """The async core runs the sync rounds over the greenlet bridge: the same spans, nested
    the same way, for an ``AsyncChatkeep`` turn that folds."""
    from chatkeep.aio import AsyncChatkeep

    async def turn() -> bool:
        server = FakeOpenAIServer(responder=lambda body: Reply.ok("A summary.")).start()
        try:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            async with AsyncChatkeep(
                    f"sqlite:///{tmp_path / 'a.db'}", model=client, dispatcher="inline",
                    config={"chat": {"max_history_tokens": 500, "recent_messages_min": 1},
                            "memory": {"distil_on_compress": False}}) as keep:
                session = await keep.sessions.create(ORG, ACTOR)
                for i in range(6):
                    await session.add_user(f"Question {i}. {FILLER}")
                    await session.add_assistant(f"Answer {i}. {FILLER}")
                await session.add_user("And now?")
                history = await keep.compressor.build_history(session, "You help.")
                return history.info.compressed
        finally:
            server.stop()

    assert asyncio.run(turn())
    (build,) = telemetry.named("chatkeep.build_history")
    (fold,) = telemetry.named("update_memory chatkeep.summary")
    (call,) = telemetry.named("chat gpt-4o-mini")
    assert fold.parent.span_id == build.context.span_id
    assert call.parent.span_id == fold.context.span_id
    assert dict(call.attributes)["chatkeep.purpose"] == "summary"
    assert dict(build.attributes)["chatkeep.history.folded"] is True


def test_a_fold_the_quota_refuses_is_counted(world: World, telemetry: Telemetry) -> None:
    tenant = Ref("organization", 9)
    world.keep.quotas.set(tenant, tokens=10, window="day")
    session = _turns(world, tenant=tenant)
    before = _totals(telemetry, "chatkeep.quota.refused")
    history = world.keep.compressor.build_history(session, "You help.")
    assert not history.info.compressed and history.info.fold_refused
    (fold,) = telemetry.named("update_memory chatkeep.summary")
    assert dict(fold.attributes)["chatkeep.fold.outcome"] == "refused"
    assert not telemetry.named("chat gpt-4o-mini")  # nothing was sent
    key = (("chatkeep.purpose", "summary"), ("chatkeep.tenant", "organization:9"))
    assert _totals(telemetry, "chatkeep.quota.refused")[key] - before.get(key, 0) == 1

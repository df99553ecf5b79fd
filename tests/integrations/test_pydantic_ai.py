"""Pydantic AI 2 on chatkeep: agents run for real, offline, on Pydantic AI's own test models
(``FunctionModel``, ``TestModel``), against ``ChatkeepConversationStore`` and the
``ChatkeepHistory`` capability, on SQLite and PostgreSQL.

Pydantic AI ships no conformance suite for conversation stores (the ``pydantic-ai-slim``
2.68.0 sdist holds the package and a workspace conformance module only), so the store is
held to its reference implementation instead: the same operations run against
``InMemoryConversationStore`` and against chatkeep must give the same outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry
from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import (
    CompactionPart,
    ImageUrl,
    InstructionDeltaPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from chatkeep import (
    Chatkeep,
    ChatSession,
    InvalidArgument,
    Ref,
    SessionKeyConflict,
    SessionNotFound,
    StoreError,
)
from chatkeep.aio import AsyncChatkeep
from chatkeep.formats.base import SUMMARY_HEADER
from chatkeep.integrations.pydantic_ai import (
    ChatkeepConversationStore,
    ChatkeepHistory,
    PreparedRequest,
)
from chatkeep.integrations.pydantic_ai._scrub import scrub_request
from chatkeep.testing import FakeOpenAIServer, Reply

ORG, OTHER = Ref("organization", 1), Ref("organization", 2)
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}
SUMMARY = "Summary: the user keeps asking about the weather in Paris, Rome and Oslo."
SYNTHESIZED = "pydantic_ai_synthesized_tool_return"
ROOT = Path(__file__).resolve().parents[2]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


# -- a model that uses tools, and what it was sent -----------------------------------------


class WeatherModel:
    """A ``FunctionModel`` function: a prompt naming cities gets one call per city (in
    parallel), their results get a signed thought and a text answer, anything else an
    echo. It keeps every request it was sent."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(messages)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        results = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if results:
            return ModelResponse(parts=[
                ThinkingPart("the tool answered", signature=f"sig-{len(self.requests)}",
                             provider_name="anthropic"),
                TextPart("; ".join(str(r.content) for r in results))])
        prompt = " ".join(p.content for p in last.parts
                          if isinstance(p, UserPromptPart) and isinstance(p.content, str))
        cities = [city for city in WEATHER if city in prompt]
        if cities:
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": city})
                                        for city in cities])
        return ModelResponse(parts=[TextPart(f"echo: {prompt}")])

    def sent(self) -> str:
        """Everything the model was sent, as JSON."""
        return "\n".join(ModelMessagesTypeAdapter.dump_json(r).decode() for r in self.requests)


def weather_agent(model: Callable[[list[ModelMessage], AgentInfo], ModelResponse],
                  *capabilities: Any, **kwargs: Any) -> Agent[Any, Any]:
    agent: Agent[Any, Any] = Agent(FunctionModel(model), capabilities=list(capabilities),
                                   **kwargs)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return WEATHER.get(city, "unknown")

    return agent


def paired(messages: Sequence[ModelMessage]) -> None:
    """Every tool call is answered before the next response, and every result answers a
    call: a request Pydantic AI's repair step leaves as it is."""
    waiting: set[str] = set()
    for message in messages:
        if isinstance(message, ModelResponse):
            assert not waiting, f"calls without a result: {waiting}"
            waiting = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    assert part.tool_call_id in waiting, f"orphan result {part.tool_call_id}"
                    waiting.discard(part.tool_call_id)
    assert not waiting, f"calls without a result: {waiting}"


def nothing_repaired(requests: Sequence[Sequence[ModelMessage]]) -> None:
    for messages in requests:
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    assert part.outcome != "interrupted", part
                    assert SYNTHESIZED not in (part.metadata or {}), part


def summary_server() -> FakeOpenAIServer:
    """The summarizer's endpoint: every chat completion is answered with the summary."""
    return FakeOpenAIServer(responder=lambda body: Reply.ok(SUMMARY))


def async_keep(db_url: str, server: FakeOpenAIServer, **config: Any) -> AsyncChatkeep:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    return AsyncChatkeep(db_url, model=client, config=config, dispatcher="inline")


async def turn(store: ChatkeepConversationStore, agent: Agent[Any, Any], key: str,
               prompt: str | None, **kwargs: Any) -> tuple[Any, list[ModelMessage]]:
    """One run of conversation ``key`` the way an application runs one: load, run, save."""
    conversation = await store.load(key) or Conversation(conversation_id=key)
    result = await agent.run(prompt, conversation=conversation, **kwargs)
    saved = list(result.conversation.messages)
    await store.save(result)
    return result, saved


# -- many turns with tools, within the budget ---------------------------------------------


def test_many_turns_with_tools_stay_in_budget_and_reload_exactly(db_url: str) -> None:
    model = WeatherModel()
    prepared: list[PreparedRequest] = []
    budget = 320
    saved: list[ModelMessage] = []

    async def scenario(server: FakeOpenAIServer) -> None:
        nonlocal saved
        async with async_keep(db_url, server, chat={"max_history_tokens": budget,
                                                    "recent_messages_min": 2}) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG, actor=Ref("user", 7))
            agent = weather_agent(model, ChatkeepHistory(store, on_request=prepared.append),
                                  system_prompt="You are a weather bot.",
                                  instructions="Answer with the tool.")
            cities = ["Paris", "Rome and Oslo", "Oslo", "Paris and Rome", "Rome"]
            for i in range(12):
                prompt = (f"({i}) What is the weather in {cities[i % len(cities)]}? I am "
                          "planning a long trip and want to pack the right clothes.")
                result, saved = await turn(store, agent, "trip", prompt)
                assert result.output.count("C and") >= 1
                loaded = await store.load("trip")
                assert loaded is not None and loaded.messages == saved  # exactly as saved
            window = await store.load("trip", limit=3)
            assert window is not None and window.messages == saved[-3:]

            # The ledger holds what the conversation cost, response by response.
            (chat,) = [line for line in await keep.usage(ORG) if line.purpose == "chat"]
            assert (chat.prompt_tokens, chat.completion_tokens) == (
                result.usage.input_tokens, result.usage.output_tokens)
            assert chat.calls == result.usage.requests == 24
            session = await keep.sessions.by_key("trip", ORG)
            assert session.total_tokens == sum(line.prompt_tokens + line.completion_tokens
                                               for line in await keep.usage(ORG))
            assert session.summary_watermark > 0
            stored = await session.read_messages()
            calls = [c.id for m in stored for c in m.tool_calls]
            assert len(calls) == len(set(calls)) == 17  # 12 turns, 5 of them with 2 cities

    with summary_server() as server:
        run(scenario(server))
    assert len(prepared) == len(model.requests) == 24
    for request in prepared:
        assert request.tokens <= budget and request.over_budget_reason is None, request
        paired(request.messages)
    nothing_repaired(model.requests)
    folded = [r for r in prepared if any(isinstance(p, CompactionPart)
                                         for m in r.history for p in m.parts)]
    assert folded and any(r.compressed for r in prepared)
    summary = next(p for m in folded[-1].history for p in m.parts
                   if isinstance(p, CompactionPart))
    assert summary.content is not None and summary.content.startswith(SUMMARY_HEADER)
    assert SUMMARY in summary.content
    # What the model was last sent: the pinned system prompt, the summary, the newest
    # closed turns as text, then this run's own messages (its tool round verbatim).
    last = model.requests[-1]
    first = last[0]
    assert isinstance(first, ModelRequest)
    assert [type(p) for p in first.parts[:2]] == [SystemPromptPart, CompactionPart]
    assert "(11)" in json.dumps(ModelMessagesTypeAdapter.dump_python(last, mode="json"))
    # The conversation grew to 48 messages; what the model is sent does not grow with it.
    assert len(saved) == 48
    assert max(len(request) for request in model.requests) <= 20


def sent_as(requests: Sequence[Sequence[ModelMessage]]) -> list[Any]:
    """What the model was sent, without timestamps and ids: kinds, texts and arguments."""
    return [[(type(m).__name__, [(type(p).__name__, str(getattr(p, "content", "")),
                                  str(getattr(p, "args", ""))) for p in m.parts])
             for m in request] for request in requests]


def test_a_run_loaded_with_for_run_sends_what_a_whole_load_sends(db_url: str) -> None:
    """``for_run`` loads the record and the newest two messages: with the capability the
    model is sent exactly what a run of the whole loaded conversation is sent, turn after
    turn with tools and folds, and the stored conversations end up the same."""
    whole, windowed = WeatherModel(), WeatherModel()

    async def scenario(server: FakeOpenAIServer) -> None:
        async with async_keep(db_url, server, chat={"max_history_tokens": 320,
                                                    "recent_messages_min": 2}) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agents = {"whole": weather_agent(whole, ChatkeepHistory(store)),
                      "windowed": weather_agent(windowed, ChatkeepHistory(store))}
            for i in range(8):
                prompt = f"({i}) Weather in {['Paris', 'Rome and Oslo'][i % 2]}? Pack well."
                for key, agent in agents.items():
                    conversation = await store.load(key) if key == "whole" and i else \
                        await store.for_run(key)
                    assert len(conversation.messages) <= (99 if key == "whole" else 2)
                    await store.save(await agent.run(prompt, conversation=conversation))
            one, two = await store.load("whole"), await store.load("windowed")
            assert one is not None and two is not None
            assert sent_as([one.messages]) == sent_as([two.messages])
            assert len(two.messages) == 8 * 4  # prompt, call(s), return(s), answer

    with summary_server() as server:
        run(scenario(server))
    assert sent_as(whole.requests) == sent_as(windowed.requests)
    assert len(windowed.requests) == 16
    nothing_repaired(windowed.requests)


def test_the_open_turn_goes_out_as_recorded(db_url: str) -> None:
    """A structured-output run leaves its turn open (its answer is a tool call): the next
    run's first request carries that turn as Pydantic AI recorded it, ids and all."""

    class Forecast(BaseModel):
        city: str
        celsius: int

    seen: list[list[ModelMessage]] = []

    def structured(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[ThinkingPart("hm", signature="s1", provider_name="x"),
                                    ToolCallPart("final_result",
                                                 {"city": "Oslo", "celsius": 2},
                                                 tool_call_id="call-1")])

    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Forecast] = Agent(
                FunctionModel(structured), output_type=Forecast,
                capabilities=[ChatkeepHistory(store)])
            first, saved = await turn(store, agent, "f", "Weather in Oslo?")
            assert first.output == Forecast(city="Oslo", celsius=2)
            assert len(saved) == 3  # the prompt, the answer as a call, its return
            second, _ = await turn(store, agent, "f", "And tomorrow?")
            sent = seen[-1]
            # The stored turn, exactly; Pydantic AI then merges the stored call's return
            # and the new prompt into one request.
            assert sent[:2] == saved[:2]
            assert isinstance(sent[2], ModelRequest) and sent[2].parts[0] == saved[2].parts[0]
            paired(sent)
            # The same call id twice in one session (FunctionModel reuses it): stored, and
            # both reload exactly.
            again = await store.load("f")
            assert again is not None and again.messages == list(second.conversation.messages)
            stored = await (await keep.sessions.by_key("f", ORG)).read_messages()
            assert [m.content for m in stored if m.role.value == "assistant"] == [
                '{"city":"Oslo","celsius":2}'] * 2  # an output tool's answer is its text

    run(scenario())
    nothing_repaired(seen)


def test_thinking_retries_and_test_model_reload_exactly(db_url: str) -> None:
    """Pydantic AI's TestModel (its output tool's call id is the same in every run), a
    tool that asks for a retry, signed thinking with provider details, structured tool
    results: every run's conversation loads back equal, with the sync ``Chatkeep`` and
    ``run_sync``."""
    attempts: list[int] = []

    class Found(BaseModel):
        code: str

    keep = Chatkeep(db_url)
    try:
        store = ChatkeepConversationStore(keep, tenant=ORG)
        agent: Agent[Any, Found] = Agent(TestModel(), output_type=Found,
                                         capabilities=[ChatkeepHistory(store)])

        @agent.tool_plain
        def lookup(code: str) -> dict[str, Any]:
            """Look a code up."""
            attempts.append(1)
            if len(attempts) % 2:
                raise ModelRetry("try again with another code")
            return {"code": code, "found": [1, 2, 3]}

        saved: list[ModelMessage] = []
        for i in range(2):
            conversation = run(store.load("tm")) or Conversation(conversation_id="tm")
            result = agent.run_sync(f"look up ({i})", conversation=conversation)
            saved = list(result.conversation.messages)
            run(store.save(result))
            loaded = run(store.load("tm"))
            assert loaded is not None and loaded.messages == saved
        retried = [p for m in saved for p in m.parts
                   if isinstance(p, ToolReturnPart) and p.outcome == "retried"]
        assert len(retried) == 1
        answers = [p.tool_call_id for m in saved for p in m.parts
                   if isinstance(p, ToolCallPart) and p.tool_name == "final_result"]
        assert len(answers) == 2 and len(set(answers)) == 1

        thinking = ModelResponse(parts=[
            ThinkingPart("secret plan", id="rs_1", signature="enc==",
                         provider_name="openai", provider_details={"k": [1, "v"]}),
            TextPart("fine")], model_name="gpt-x")
        conversation = run(store.load("tm"))
        assert conversation is not None
        # A request of silent parts alone (a one-request nudge) rides with its neighbour.
        nudge = ModelRequest(parts=[SystemPromptPart("Be brief now.", scope="request")])
        conversation.messages.extend([nudge, ModelRequest(parts=[UserPromptPart("and?")]),
                                      thinking])
        run(store.save(conversation))
        loaded = run(store.load("tm"))
        assert loaded is not None and loaded.messages == [*saved, *conversation.messages[-3:]]
        assert loaded.messages[-1] == thinking
        stored = keep.sessions.by_key("tm", ORG).read_messages()
        assert "Be brief now." not in [m.content for m in stored]  # never pinned
    finally:
        keep.close()


# -- the store's contract ------------------------------------------------------------------


async def contract(store: ConversationStore, agent: Agent[Any, Any]) -> list[Any]:
    """Operations of the ``ConversationStore`` contract, and what each gave."""
    seen: list[Any] = []

    async def attempt(action: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        try:
            return await action()
        except ConversationConflict:
            return "conflict"

    first = await agent.run("Weather in Paris?", conversation=Conversation(conversation_id="a"))
    written = await store.save(first)
    seen.append(len(written))
    kept = await store.load_entries("a")
    seen.append(kept == written)  # the ids save returned are the ones stored
    seen.append(await store.read_entry(written[1].id) == written[1])
    stale = await store.load("a")
    assert stale is not None
    second = await agent.run("And Rome?", conversation=await store.load("a"))
    seen.append(len(await store.save(second)))
    loaded = await store.load("a")
    assert loaded is not None
    seen.append(loaded.messages == list(second.conversation.messages))
    window = await store.load("a", limit=2)
    assert window is not None
    seen.append(window.messages == loaded.messages[-2:])
    entries = await store.load_entries("a")
    assert entries is not None
    seen.append([e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]])
    # A conversation loaded before another save: refused, nothing stored.
    late = await agent.run("Oslo?", conversation=stale)
    seen.append(await attempt(lambda: store.save(late)))
    # The same id started afresh while it is stored: refused.
    fresh = await agent.run("Hi", conversation=Conversation(conversation_id="a"))
    seen.append(await attempt(lambda: store.save(fresh)))
    # A serialized copy, extended: the stored messages are recognised, the rest appended.
    copy = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(loaded))
    third = await agent.run("Oslo again?", conversation=copy)
    seen.append(len(await store.save(third)))
    reloaded = await store.load("a")
    assert reloaded is not None
    seen.append(reloaded.messages == list(third.conversation.messages))
    # A second conversation; the list is newest first.
    other = await agent.run("Hi", conversation=Conversation(conversation_id="b"))
    await store.save(other)
    seen.append([r.conversation_id for r in await store.list_conversations()])
    seen.append([r.conversation_id for r in await store.list_conversations(limit=1)])
    # Delete: gone; saved again under its id it starts empty.
    await store.delete("a")
    seen.append(await store.load("a"))
    seen.append([r.conversation_id for r in await store.list_conversations()])
    restart = await agent.run("New start", conversation=Conversation(conversation_id="a"))
    seen.append(len(await store.save(restart)))
    back = await store.load("a")
    assert back is not None
    seen.append(back.messages == list(restart.conversation.messages))
    seen.append(await attempt(lambda: store.save(third)))  # its revision is gone
    return seen


def test_the_store_keeps_the_contract_of_pydantic_ais_own_store(db_url: str) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        reference = await contract(InMemoryConversationStore(), weather_agent(WeatherModel()))
        async with AsyncChatkeep(db_url) as keep:
            ours = await contract(ChatkeepConversationStore(keep, tenant=ORG),
                                  weather_agent(WeatherModel()))
        return reference, ours

    reference, ours = run(scenario())
    assert ours == reference
    assert "conflict" in ours


def test_concurrent_saves_of_one_conversation_one_wins(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent = weather_agent(WeatherModel())
            await store.save(await agent.run("Hi", conversation=Conversation(
                conversation_id="c")))
            loaded = [await store.load("c") for _ in range(4)]
            results = [await agent.run(f"Weather in Paris? ({i})", conversation=c)
                       for i, c in enumerate(loaded)]
            outcomes = await asyncio.gather(*(store.save(r) for r in results),
                                            return_exceptions=True)
            won = [r for r, o in zip(results, outcomes, strict=True)
                   if not isinstance(o, BaseException)]
            assert len(won) == 1, outcomes
            assert sum(isinstance(o, ConversationConflict) for o in outcomes) == 3, outcomes
            final = await store.load("c")
            assert final is not None and final.messages == list(won[0].conversation.messages)
            session = await keep.sessions.by_key("c", ORG)
            assert session.message_count == 2 + 4  # hi, echo; user, call, result, answer

    run(scenario())


def test_a_delete_cut_short_is_finished_by_the_next_save(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete that dies between removing the record and removing the messages leaves
    no record; saving the id again removes the old messages first, so chatkeep's history
    of the new conversation holds nothing of the deleted one."""
    model = WeatherModel()

    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent = weather_agent(model, ChatkeepHistory(store))
            await turn(store, agent, "d", "Weather in Oslo? My secret word is marmalade.")
            with monkeypatch.context() as patch:
                patch.setattr(ChatSession, "clear", _crash)
                with pytest.raises(StoreError):
                    await store.delete("d")
            assert await store.load("d") is None
            assert await store.list_conversations() == []
            _, saved = await turn(store, agent, "d", "Hello again")
            assert "marmalade" not in json.dumps(
                ModelMessagesTypeAdapter.dump_python(model.requests[-1], mode="json"))
            loaded = await store.load("d")
            assert loaded is not None and loaded.messages == saved
            with pytest.raises(SessionNotFound):
                await store.read_entry("no-such-entry")

    run(scenario())


def _crash(self: ChatSession) -> int:
    raise StoreError("the connection dropped")


def test_branch_fork_and_rewrites_are_refused_and_write_nothing(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent = weather_agent(WeatherModel())
            _, saved = await turn(store, agent, "b", "Weather in Rome?")
            before = await store.load("b")
            assert before is not None
            with pytest.raises(InvalidArgument, match="append-only"):
                await store.branch("b", at=1, expected_revision=before.revision)
            with pytest.raises(InvalidArgument, match="append-only"):
                await store.fork("b")
            rewritten = Conversation(conversation_id="b", messages=[saved[0]],
                                     revision=before.revision)
            rewritten.messages.append(ModelResponse(parts=[TextPart("another answer")]))
            with pytest.raises(InvalidArgument, match="append-only"):
                await store.save(rewritten)
            after = await store.load("b")
            assert after is not None
            assert (after.messages, after.revision) == (before.messages, before.revision)
            # Keeping every message is no branch at all: taken.
            kept = await store.branch("b", at=len(saved), expected_revision=before.revision)
            assert kept.messages == saved

    run(scenario())


# -- tenants -------------------------------------------------------------------------------


def test_tenants_are_isolated(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep)  # no default tenant: scope names it
            agent = weather_agent(WeatherModel())
            mine = await agent.run("Weather in Paris?", conversation=Conversation(
                conversation_id="same"))
            await store.save(mine, scope="organization:1")
            theirs = await agent.run("Hello", conversation=Conversation(conversation_id="same"))
            await store.save(theirs, scope=OTHER)
            one = await store.load("same", scope=Ref("organization", "1"))
            two = await store.load("same", scope="organization:2")
            assert one is not None and two is not None
            assert one.messages == list(mine.conversation.messages)
            assert two.messages == list(theirs.conversation.messages)
            assert await store.load("same", scope="organization:3") is None
            assert [r.scope for r in await store.list_conversations(scope=ORG)] == \
                ["organization:1"]
            with pytest.raises(InvalidArgument, match="tenant"):
                await store.load("same")
            # Another tenant's conversation cannot be saved over or deleted.
            with pytest.raises(ConversationConflict):
                await store.save(one, scope="organization:2")
            await store.delete("same", scope="organization:3")
            assert await store.load("same", scope=OTHER) is not None
            # A run routed to another tenant than the capability's finds nothing.
            fixed = weather_agent(WeatherModel(), ChatkeepHistory(store, tenant=ORG))
            with pytest.raises(SessionNotFound):
                await fixed.run("Hi", conversation=one, deps={"tenant": "organization:2"})
            # A conversation opened for one user is not another's.
            alice = ChatkeepConversationStore(keep, tenant=ORG, actor=Ref("user", "alice"))
            bob = ChatkeepConversationStore(keep, tenant=ORG, actor=Ref("user", "bob"))
            await alice.save(await agent.run("Hi", conversation=Conversation(
                conversation_id="private")))
            with pytest.raises(SessionKeyConflict):
                await bob.save(await agent.run("Hi", conversation=Conversation(
                    conversation_id="private")))

    run(scenario())


# -- paused runs ---------------------------------------------------------------------------


def test_a_run_paused_for_approval_resumes_without_repairs(db_url: str) -> None:
    seen: list[list[ModelMessage]] = []

    def approver(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"path": "a.txt"})])

    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(FunctionModel(approver),
                                           output_type=[str, DeferredToolRequests],
                                           capabilities=[ChatkeepHistory(store)])

            @agent.tool_plain(requires_approval=True)
            def delete_file(path: str) -> str:
                """Delete a file."""
                return f"deleted {path}"

            paused, _ = await turn(store, agent, "p", "Delete a.txt")
            assert isinstance(paused.output, DeferredToolRequests)
            loaded = await store.for_run("p")  # the newest two messages and the record
            assert len(loaded.messages) == 2
            assert loaded.deferred_tool_requests == paused.output
            approvals = DeferredToolResults(
                approvals={paused.output.approvals[0].tool_call_id: True})
            resumed = await agent.run(conversation=loaded, deferred_tool_results=approvals)
            assert resumed.output == "done"
            await store.save(resumed)
            paired(seen[-1])
            final = await store.load("p")
            assert final is not None
            assert final.messages[-len(resumed.conversation.messages):] == \
                list(resumed.conversation.messages)
            assert final.deferred_tool_requests is None
            await turn(store, agent, "p", "Thanks")
            paired(seen[-1])

    run(scenario())
    nothing_repaired(seen)


# -- privacy -------------------------------------------------------------------------------


RAW = ["ana.garcia@example.com", "ANA.GARCIA@EXAMPLE.COM", "7911 123456", "7911123456"]


def test_no_detected_value_reaches_the_model(db_url: str) -> None:
    """With redaction on, the model (and the summarizer) never see a raw value: not in
    the run's new prompt, a tool's result, the instructions, the stored history, nor the
    summary; what the model writes in placeholders is stored with the real values, and
    the conversation still reloads exactly as Pydantic AI saved it."""
    weather = WeatherModel()
    instructions: list[str | None] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) and p.tool_name == "contact" for p in last.parts):
            weather.requests.append(messages)
            return ModelResponse(parts=[TextPart("I will write to <EMAIL_1>.")])
        if any(isinstance(p, UserPromptPart) and "contact" in str(p.content)
               for p in last.parts):
            weather.requests.append(messages)
            return ModelResponse(parts=[ToolCallPart("contact", {"name": "Ana"})])
        return weather(messages, info)

    async def scenario(server: FakeOpenAIServer) -> None:
        async with async_keep(db_url, server, privacy={"anonymize_pii": True},
                              chat={"max_history_tokens": 100,
                                    "recent_messages_min": 2}) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent = weather_agent(model, ChatkeepHistory(store),
                                  instructions="The user's e-mail is ana.garcia@example.com.")

            @agent.tool_plain
            def contact(name: str) -> str:
                """How to reach someone."""
                return "ana.garcia@example.com, +44 7911 123456"

            saved: list[ModelMessage] = []
            prompts = ["Write to ANA.GARCIA@EXAMPLE.COM or call +44 7911 123456. contact Ana",
                       "What is the weather in Paris?", "And in Rome and Oslo?",
                       "Use my number 7911123456 please", "Weather in Oslo?",
                       "contact her again", "What is the weather in Paris?"]
            for prompt in prompts:
                _, saved = await turn(store, agent, "pii", prompt)
            loaded = await store.load("pii")
            assert loaded is not None and loaded.messages == saved
            # The exact record keeps what Pydantic AI kept: the model's text restored at the
            # model boundary (restore_output), as chatkeep's text holds it.
            record = json.dumps(ModelMessagesTypeAdapter.dump_python(saved, mode="json"))
            assert "I will write to ana.garcia@example.com." in record
            assert "I will write to <EMAIL_1>." not in record
            session = await keep.sessions.by_key("pii", ORG)
            stored = await session.read_messages()
            assert any(m.content == "I will write to ana.garcia@example.com." for m in stored)
            assert session.summary_watermark > 0

    with summary_server() as server:
        run(scenario(server))
        bodies = server.bodies()
    sent = weather.sent()
    assert "<EMAIL_1>" in sent and "<PHONE_1>" in sent
    assert bodies, "the summarizer was called"
    for raw in RAW:
        assert raw not in sent
        assert all(raw not in (text or "") for text in instructions)
        assert all(raw not in body for body in bodies)
    nothing_repaired(weather.requests)


def test_every_text_of_a_request_is_scrubbed_and_signed_parts_withheld(db_url: str) -> None:
    """The request body through the session's real egress: every kind of text redacted,
    arguments still valid JSON, a signed thought holding a value withheld whole (its
    signature would no longer match), an unsigned one redacted, the run's objects untouched."""
    keep = Chatkeep(db_url, config={"privacy": {"anonymize_pii": True}})
    try:
        session = keep.sessions.create(ORG)
        email = "ana.garcia@example.com"
        messages: list[ModelMessage] = [
            ModelRequest(parts=[
                SystemPromptPart(f"The user is {email}"),
                UserPromptPart(["call me on +44 7911 123456", ImageUrl("https://x.test/a.png")]),
                InstructionDeltaPart(id="agent:contact", content=f"Write to {email}")],
                instructions=f"Reach {email} only by mail."),
            ModelResponse(parts=[
                ThinkingPart(f"mail {email}", signature="sig", provider_name="anthropic"),
                ThinkingPart(f"unsigned: {email}"),
                TextPart(f"I will mail {email}."),
                ToolCallPart("send", json.dumps({"to": email}), tool_call_id="c1"),
                ToolCallPart("send", {"to": email, email: 1}, tool_call_id="c2")]),
            ModelRequest(parts=[
                ToolReturnPart("send", {"sent_to": email}, tool_call_id="c1"),
                ToolReturnPart("send", f"sent to {email}", tool_call_id="c2")])]
        before = ModelMessagesTypeAdapter.dump_json(messages)
        out = scrub_request(messages, [f"Contact: {email}"],
                            lambda body: keep.privacy.scrub(session, body))
        assert ModelMessagesTypeAdapter.dump_json(messages) == before  # untouched
        sent = ModelMessagesTypeAdapter.dump_json(out.messages).decode() + json.dumps(
            out.instructions)
        # (the phone as typed, and its digits alone: "7911" by itself also turns up in
        # the parts' timestamps, 09:35:34.679115)
        assert email not in sent and "7911 123456" not in sent and "7911123456" not in sent
        assert out.withheld == 1
        response = out.messages[1]
        assert isinstance(response, ModelResponse)
        assert [p.part_kind for p in response.parts] == [
            "thinking", "text", "tool-call", "tool-call"]
        assert response.parts[0] == ThinkingPart("unsigned: <EMAIL_1>")
        call = response.parts[2]
        assert isinstance(call, ToolCallPart) and json.loads(call.args_as_json_str()) == {
            "to": "<EMAIL_1>"}
        user = out.messages[0].parts[1]
        assert isinstance(user, UserPromptPart) and user.content[1] == ImageUrl(
            "https://x.test/a.png")
        assert out.instructions == ["Contact: <EMAIL_1>"]
    finally:
        keep.close()


# -- packaging -----------------------------------------------------------------------------


def test_without_pydantic_ai_the_import_names_the_extra() -> None:
    code = ("import sys; sys.modules['pydantic_ai'] = None\n"
            "try:\n    import chatkeep.integrations.pydantic_ai\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert "pip install 'chatkeep[pydantic-ai]'" in out.stdout


def test_the_example_runs(tmp_path: Path) -> None:
    env = {**os.environ, "CHATKEEP_EXAMPLE_DB": str(tmp_path / "example.db")}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "pydantic_ai_chat.py")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "reloaded exactly: True" in out.stdout
    assert "agent: Noted. I will write to ana.garcia@example.com." in out.stdout
    assert "agent (streamed): I will write to ana.garcia@example.com as agreed." in out.stdout
    assert "ana.garcia@example.com" not in out.stdout.split("model saw:")[1]
    assert "<EMAIL_1>" in out.stdout

"""Every model request of an Agents SDK run is reserved on the tenant's quota and settled
(issue 33): ``session.run`` / ``run_sync`` / ``run_streamed`` refuse a request the quota
cannot hold before anything is sent (``QuotaExceeded``, the strict fake receives nothing),
hold each request's input plus its output ceiling while it is in flight, settle it at the
usage the response reports, and release it when the call fails before its response. The
SDK's own OpenAI models against the strict local fake, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import UserError

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import FakeOpenAIServer, Reply

set_tracing_disabled(True)
ORG, OTHER = Ref("organization", 1), Ref("organization", 2)
#: The usage the fake reports: a tool call, then the answer (per user turn).
CALL, ANSWER = (100, 10), (130, 7)


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


@function_tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"18C in {city}"


class World:
    """The strict fake, answering a weather question in two model requests, and what the
    tenant's quota held while each request was in flight (read from another connection)."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.server = FakeOpenAIServer(responder=self.answer)
        self.held_during: list[int] = []
        self.failing = False
        self.arguments: dict[str, str] = {"city": "Paris"}

    def answer(self, body: dict[str, Any]) -> Reply:
        quota = self.reader().quotas.get(ORG)
        self.held_during.append(quota.reserved if quota is not None else -1)
        if self.failing:
            return Reply.error(500)
        items = body.get("messages") or body.get("input") or []
        last = items[-1] if items else {}
        if "You are the expert" in json.dumps([body.get("instructions"), items[:1]]):
            return Reply.ok("18C.", prompt_tokens=20, completion_tokens=2)
        if last.get("role") == "tool" or last.get("type") == "function_call_output":
            return Reply.ok("Sunny, 18C.", prompt_tokens=ANSWER[0],
                            completion_tokens=ANSWER[1])
        return Reply.calls((f"call_{len(items)}", "get_weather", json.dumps(self.arguments)),
                           prompt_tokens=CALL[0], completion_tokens=CALL[1])

    _reader: Chatkeep | None = None

    def reader(self) -> Chatkeep:
        if self._reader is None:
            self._reader = Chatkeep(self.db_url)
        return self._reader

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.server.base_url, api_key="k", max_retries=0)

    def keep(self) -> AsyncChatkeep:
        return AsyncChatkeep(self.db_url, model=self.client())

    def agent(self, api: str = "chat", **settings: Any) -> Agent[Any]:
        kind: Any = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
        return Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                     model=kind(model="gpt-x", openai_client=self.client()),
                     model_settings=ModelSettings(**settings))


@pytest.fixture
def world(db_url: str) -> Any:
    w = World(db_url)
    with w.server:
        yield w
    if w._reader is not None:
        w._reader.close()


async def _run(session: ChatkeepSession, agent: Agent[Any], text: str, how: str,
               **kwargs: Any) -> Any:
    if how == "run":
        return await session.run(agent, text, **kwargs)
    if how == "run_streamed":
        streamed = session.run_streamed(agent, text, **kwargs)
        async for _ in streamed.stream_events():
            pass
        return streamed
    # run_sync drives its own loop: off this one, in a thread.
    return await asyncio.to_thread(session.run_sync, agent, text, **kwargs)


HOWS = [("chat", "run"), ("responses", "run"), ("chat", "run_streamed"), ("chat", "run_sync")]


@pytest.mark.parametrize(("model_api", "how"), HOWS)
def test_every_request_of_a_multi_step_run_is_reserved_and_settled(world: World,
                                                                   model_api: str,
                                                                   how: str) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await _run(session, world.agent(model_api), "Weather in Paris?", how)
            assert result.final_output == "Sunny, 18C."
            quota = await keep.quotas.get(ORG)
            assert quota is not None
            # Settled at the usage each response reported, nothing left held.
            assert (quota.spent, quota.reserved) == (sum(CALL) + sum(ANSWER), 0)

    run(scenario())
    # Each request was sent with its own reservation held: its input plus the ceiling
    # (quotas.output_ceiling, 4096, as the agent names no max_tokens).
    assert len(world.held_during) == 2
    assert all(4096 < held < 4096 + 1000 for held in world.held_during), world.held_during
    assert world.server.rejected == []


def test_a_tenant_without_a_quota_runs_and_nothing_is_written(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(world.agent(), "Weather in Paris?")
            assert result.final_output == "Sunny, 18C."
            assert await keep.quotas.list() == [] and await keep.quotas.get(ORG) is None

    run(scenario())
    assert world.held_during == [-1, -1]


def test_the_configured_default_quota_applies(db_url: str) -> None:
    world = World(db_url)

    async def scenario() -> None:
        keep = AsyncChatkeep(db_url, model=world.client(),
                             config={"quotas": {"default_tokens": 3000}})
        async with keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(QuotaExceeded):
                await session.run(world.agent(), "Weather in Paris?")

    with world.server:
        run(scenario())
    assert world.server.requests == []


def test_the_output_ceiling_is_the_requests_max_tokens(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(world.agent(max_tokens=300), "Weather in Paris?")
            # A run's settings resolve over the agent's.
            await session.run(world.agent(), "And in Rome?",
                              run_config=RunConfig(model_settings=ModelSettings(max_tokens=50)))

    run(scenario())
    first, second, third, fourth = world.held_during
    assert all(300 < held < 300 + 1000 for held in (first, second)), world.held_during
    assert all(50 < held < 50 + 1000 for held in (third, fourth)), world.held_during


@pytest.mark.parametrize("named_by", ["provider", "run_config.model"])
def test_models_named_by_name_or_by_the_run_config_are_reserved(world: World,
                                                                named_by: str) -> None:
    """An agent naming its model by name (the run's model provider makes it) and a
    ``run_config.model`` overriding every agent's are reserved the same way."""
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            agent = world.agent()
            if named_by == "provider":
                agent.model = "gpt-x"
                config = RunConfig(model_provider=OpenAIProvider(
                    openai_client=world.client(), use_responses=False))
            else:
                agent.model = "never-used"
                config = RunConfig(model=OpenAIChatCompletionsModel(
                    model="gpt-x", openai_client=world.client()))
            result = await session.run(agent, "Weather in Paris?", run_config=config)
            assert result.final_output == "Sunny, 18C."
            quota = await keep.quotas.get(ORG)
            assert quota is not None
            assert (quota.spent, quota.reserved) == (sum(CALL) + sum(ANSWER), 0)

    run(scenario())
    assert len(world.held_during) == 2 and all(h > 4096 for h in world.held_during)
    assert all(request["model"] == "gpt-x" for request in world.server.requests)


@pytest.mark.parametrize("how", ["run", "run_streamed", "run_sync"])
def test_over_quota_is_refused_before_anything_is_sent(world: World, how: str) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=2000)  # less than the 4096 ceiling
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(QuotaExceeded) as refused:
                await _run(session, world.agent(), "Weather in Paris?", how)
            assert refused.value.remaining == 2000 and refused.value.requested > 4096
            quota = await keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (0, 0)
            # Another tenant is not affected, before or after.
            other = await ChatkeepSession.open(keep, tenant=OTHER)
            await keep.quotas.set(OTHER, tokens=1_000_000)
            result = await _run(other, world.agent(), "Weather in Paris?", how)
            assert result.final_output == "Sunny, 18C."
            spent = await keep.quotas.get(OTHER)
            assert spent is not None and spent.spent == sum(CALL) + sum(ANSWER)
            assert (await keep.quotas.get(ORG)) == quota

    run(scenario())
    assert len(world.server.requests) == 2  # the other tenant's two, none of the refused run


def test_a_run_refused_midway_keeps_what_was_settled(world: World) -> None:
    """The first request fits; the second (its input grown by the tool turn, plus the
    ceiling) does not: the run stops with QuotaExceeded before sending it, the first
    settled at its usage."""
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            measured = await ChatkeepSession.open(keep, tenant=ORG, session_id="measured")
            await measured.run(world.agent(), "Weather in Paris?")
            first = world.held_during[0]  # what the same first request holds
            spent = sum(CALL) + sum(ANSWER)
            await keep.quotas.set(ORG, tokens=spent + first)
            session = await ChatkeepSession.open(keep, tenant=ORG, session_id="refused")
            with pytest.raises(QuotaExceeded):
                await session.run(world.agent(), "Weather in Paris?")
            quota = await keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (spent + sum(CALL), 0)

    run(scenario())
    assert len(world.server.requests) == 3  # two measured, then the refused run's first
    assert world.held_during[2] == world.held_during[0]


@pytest.mark.parametrize("how", ["run", "run_streamed"])
def test_a_request_that_fails_before_its_response_is_released(world: World,
                                                              how: str) -> None:
    world.failing = True

    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(openai.APIStatusError):
                await _run(session, world.agent(), "Weather in Paris?", how)
            quota = await keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (0, 0)

    run(scenario())
    assert len(world.server.requests) == 1 and world.held_during[0] > 4096


def test_a_streamed_request_without_usage_counts_at_its_reserved_amount(world: World) -> None:
    """A response that reports no usage (a stream without include_usage) is settled at
    what it held: never less than it may have cost."""
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            config = RunConfig(model_settings=ModelSettings(include_usage=False))
            await _run(session, world.agent(), "Weather in Paris?", "run_streamed",
                       run_config=config)
            quota = await keep.quotas.get(ORG)
            assert quota is not None and quota.reserved == 0
            assert quota.spent == sum(world.held_during) > 2 * 4096

    run(scenario())
    assert all(request["stream_options"] == {"include_usage": False}
               for request in world.server.requests)


def test_an_agent_run_as_a_tool_is_reserved_too(world: World) -> None:
    """The nested agent of ``as_tool`` is the caller's own object (the SDK runs it, not a
    clone): its requests are reserved by the run's filter before they are sent and
    counted at their reserved amount."""
    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            expert = world.agent(max_tokens=100_000)
            expert.name, expert.instructions, expert.tools = "expert", "You are the expert.", []
            triage = world.agent()
            world.arguments = {"input": "Paris"}
            triage.tools = [expert.as_tool(tool_name="get_weather",
                                           tool_description="Ask the expert.")]
            await session.run(triage, "Weather in Paris?")
            quota = await keep.quotas.get(ORG)
            assert quota is not None and quota.reserved == 0
            counted = quota.spent - sum(CALL) - sum(ANSWER)
            assert 100_000 < counted < 100_000 + 1000, quota  # its input + its max_tokens

            # Room for the caller's requests, not for the nested one's 100,000 ceiling:
            # refused before it is sent, it fails as a tool does (the SDK hands the model
            # its fixed error text), or raises with failure_error_function=None.
            await keep.quotas.set(ORG, tokens=quota.spent + 50_000)
            result = await session.run(triage, "Weather in Rome?")
            assert result.final_output == "Sunny, 18C."
            assert len(world.server.requests) == 3 + 2
            strict = world.agent()
            strict.tools = [expert.as_tool(tool_name="get_weather", tool_description="Ask.",
                                           failure_error_function=None)]
            with pytest.raises(UserError) as failed:  # the SDK's wrapping of a tool's error
                await session.run(strict, "Weather in Oslo?")
            assert isinstance(failed.value.__cause__, QuotaExceeded)

    run(scenario())
    assert len(world.server.requests) == 3 + 2 + 1
    assert all("You are the expert" not in body for body in world.server.bodies()[3:])


def test_a_stream_cancelled_mid_answer_counts_at_its_reserved_amount(world: World) -> None:
    """The app stops a streamed run after its first text delta: the request was sent and
    partly answered, so its reservation counts at the amount it held (never released)."""
    world.server.responder = _holding(world, lambda body: Reply.ok("Sunny in Paris, 18C."))

    async def scenario() -> None:
        async with world.keep() as keep:
            await keep.quotas.set(ORG, tokens=1_000_000)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            streamed = session.run_streamed(world.agent(), "Weather in Paris?")
            async for event in streamed.stream_events():
                if event.type == "raw_response_event" and \
                        event.data.type == "response.output_text.delta":
                    streamed.cancel()
            quota = await keep.quotas.get(ORG)
            assert quota is not None and quota.reserved == 0
            assert quota.spent == world.held_during[0] > 4096

    run(scenario())


def _holding(world: World, answer: Callable[[dict[str, Any]], Reply]) -> Any:
    """``answer``, after noting what the quota holds (as World.answer does)."""
    def respond(body: dict[str, Any]) -> Reply:
        quota = world.reader().quotas.get(ORG)
        world.held_during.append(quota.reserved if quota is not None else -1)
        return answer(body)

    return respond

"""One exit, by construction (issue 20): a property over whole sessions.

Hypothesis writes a session with personal values (an e-mail, a phone, an SSN, a card, an
IBAN, and a name the session learns from "my name is ...") in random fields of random
message kinds, recorded in all three wire formats and through the plain API: user and
assistant text, a Chat ``name``, message metadata, a pinned system message, tool-call
names, argument keys and values, tool results (JSON text, JSON ``\\u`` escapes,
percent-encoded), tool arguments under the keys the wire formats give a meaning
(``signature``, ``encrypted_content``, ``type``, ``role``: user data there, issue 30 item 3),
Responses reasoning summaries, Anthropic signed thinking; the subject
reference; memories the distiller's model writes. Each value is written plain at least
once in user or assistant text (where every path reads it); its other copies are in any
surface form (``ALL_FORMS``: as typed, upper or lower case, JSON-escaped, URL-encoded, and
those of issue 30 item 7: HTML references, markup, base64, a JWT payload, hex, ``[at]``
words, spelt out, a user name, look-alike letters).

Then everything that can send runs against the recording server: ``build_history`` in
each format with a budget small enough that the LLM summarizer folds, the distiller
(``distil_on_compress`` and ``memory.distil``), recall with embeddings (the history's
memory provider and ``memory.recall``), and a later session recalling the memories. No
raw or normalised form of any value may appear in any recorded request body nor in any
built history (see ``egress_helpers.leaks``). A second property does the same for Agents
SDK runs (``session.run``) whose tool answers with the values in any surface form.

Two placements leaked when this test was written, each kept as a minimal reproduction at
the end of this module: another form of a value beside its plain copy in the text it is
learnt from, and any undetectable form in the open turn's user text (the first history's
recall query).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    function_tool,
    set_tracing_disabled,
)
from egress_helpers import (
    ALL_FORMS,
    KINDS,
    POOLS,
    World,
    assert_never_raw,
    open_world,
    sent_history,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkeep import Chatkeep, Ref, ToolCall
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.sessions import ChatSession
from chatkeep.testing import AgentModel, FakeOpenAIServer
from chatkeep.testing.wire_rules import seal, sign

set_tracing_disabled(True)  # nothing leaves this machine
ORG = Ref("organization", 1)
ACTOR = Ref("user", 3)
SYSTEM = "You help customers."
METHODS = ("api", "openai_chat", "openai_responses", "anthropic_messages")
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
BUDGET = 500
FILLER = "More detail about the request follows here. " * 10
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# -- the scenario ------------------------------------------------------------------------

#: Keys a structured tool argument holds values under: the wire formats' own names.
SIGNED_NAMES = ("signature", "encrypted_content", "type", "role")
#: Where a value is placed: ("turn", t, "user" | "assistant" | "user_name" | "metadata"),
#: ("round", t, r, "tool_name" | "arg_key" | "arg_value" | "arg_signed_key" | "result" |
#: "reasoning" | "thinking"), ("system",).
Slot = tuple[Any, ...]


@dataclass
class Turn:
    user: str
    """How the user message is recorded (one of ``METHODS``)."""
    rounds: list[str]
    """How each tool round (assistant calls, then their results) is recorded."""
    assistant: str | None
    """How the closing assistant text is recorded; ``None``: the open turn (the last)."""


@dataclass
class Scenario:
    values: dict[str, str]
    turns: list[Turn]
    system_after: int | None
    """A pinned system message is added after this closed turn (``None``: none)."""
    subject: str | None
    """The kind of value the subject reference's id is (``None``: no subject)."""
    placed: dict[Slot, list[str]] = field(default_factory=dict)
    model_written: list[str] = field(default_factory=list)
    formats: tuple[str, ...] = FORMATS
    later_format: str = "openai_chat"
    recall_from: int = 0
    distil_first: bool = False

    def at(self, *slot: Any) -> list[str]:
        return self.placed.get(slot, [])



def slots_of(turns: list[Turn], system_after: int | None) -> tuple[list[Slot], list[Slot]]:
    """(text slots every path reads, every slot)."""
    text: list[Slot] = []
    every: list[Slot] = []
    for t, turn in enumerate(turns):
        text.append(("turn", t, "user"))
        if turn.assistant is not None:
            text.append(("turn", t, "assistant"))
        if turn.user in ("api", "openai_chat"):
            every.append(("turn", t, "user_name"))
        if turn.user == "api":
            every.append(("turn", t, "metadata"))
        for r, method in enumerate(turn.rounds):
            every += [("round", t, r, f) for f in ("tool_name", "arg_key", "arg_value",
                                                    "arg_signed_key", "result")]
            if method == "openai_responses":
                every.append(("round", t, r, "reasoning"))
            if method == "anthropic_messages":
                every.append(("round", t, r, "thinking"))
    if system_after is not None:
        every.append(("system",))
    return text, text + every


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    values = {kind: draw(st.sampled_from(POOLS[kind])) for kind in KINDS}
    closed = draw(st.integers(3, 4))
    turns = [Turn(draw(st.sampled_from(METHODS)),
                  draw(st.lists(st.sampled_from(METHODS), min_size=0, max_size=1)),
                  draw(st.sampled_from(METHODS))) for _ in range(closed)]
    turns.append(Turn(draw(st.sampled_from(METHODS)),
                      draw(st.lists(st.sampled_from(METHODS), min_size=1, max_size=2)), None))
    system_after = draw(st.none() | st.integers(0, closed - 1))
    scenario = Scenario(values, turns, system_after,
                        draw(st.sampled_from([None, "email", "phone", "ssn"])))
    text_slots, every_slot = slots_of(turns, system_after)
    # Each value once, plain, where every path reads it (the name with its cue)...
    learnt: dict[str, Slot] = {}
    for kind in KINDS:
        slot = learnt[kind] = draw(st.sampled_from(text_slots))
        value = values[kind]
        scenario.placed.setdefault(slot, []).append(
            f"By the way, my name is {value}." if kind == "name" else f"Note {value} please.")
    # ... and copies anywhere, in any surface form (also beside the plain copy in the text
    # the value is learnt from, and in the open turn's user text: the first history's
    # recall query; each was a leak, with its own test below).
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(KINDS))
        allowed = list(every_slot)
        # The field first, then where: rare fields (thinking) are drawn as often as text.
        fields = sorted({s[-1] for s in allowed})
        chosen = draw(st.sampled_from(fields))
        slot = draw(st.sampled_from([s for s in allowed if s[-1] == chosen]))
        form = draw(st.sampled_from(ALL_FORMS))
        scenario.placed.setdefault(slot, []).append(written(values[kind], form))
    scenario.model_written = [written(values[kind], form) for kind, form in draw(st.lists(
        st.tuples(st.sampled_from(KINDS), st.sampled_from(ALL_FORMS)), max_size=2))]
    scenario.formats = tuple(draw(st.permutations(FORMATS)))
    scenario.later_format = draw(st.sampled_from(FORMATS))
    scenario.recall_from = draw(st.integers(0, closed))
    scenario.distil_first = draw(st.booleans())
    return scenario


# -- recording it -----------------------------------------------------------------------


def joined(pieces: list[str], lead: str = "") -> str:
    return " ".join([lead, *pieces]).strip()


def user_text(scenario: Scenario, t: int) -> str:
    """A closed turn's user text is long (so the budget folds it), the open turn's short (so
    the protected tail fits the budget and the fold is not put off)."""
    lead = f"Turn {t}: {FILLER}" if scenario.turns[t].assistant else "Now, one more thing:"
    return joined(scenario.at("turn", t, "user"), lead)


def record_user(session: ChatSession, scenario: Scenario, t: int) -> None:
    method = scenario.turns[t].user
    text = user_text(scenario, t)
    name = joined(scenario.at("turn", t, "user_name"))[:255] or None
    if method == "api":
        meta = scenario.at("turn", t, "metadata")
        metadata = {"note": joined(meta), **{m: True for m in meta}} if meta else None
        session.add_user(text, name=name, metadata=metadata)
    elif method == "openai_chat":
        message: dict[str, Any] = {"role": "user", "content": text}
        if name:
            message["name"] = name
        session.record([message], format=method)
    else:
        session.record([{"role": "user", "content": text}], format=method)


def record_assistant(session: ChatSession, scenario: Scenario, t: int) -> None:
    method = scenario.turns[t].assistant
    text = joined(scenario.at("turn", t, "assistant"), f"Answer {t}: {FILLER}")
    if method == "api":
        session.add_assistant(text)
    elif method == "openai_chat":
        session.record([{"role": "assistant", "content": text}], format=method)
    elif method == "openai_responses":
        session.record([{"type": "message", "role": "assistant", "id": f"msg_{t}",
                         "status": "completed", "content": [
                             {"type": "output_text", "text": text, "annotations": []}]}],
                       format=method)
    else:
        session.record([{"role": "assistant", "content": [{"type": "text", "text": text}]}],
                       format="anthropic_messages")


def record_round(session: ChatSession, scenario: Scenario, t: int, r: int) -> None:
    method = scenario.turns[t].rounds[r]
    call_id = f"call_{t}_{r}"
    names = scenario.at("round", t, r, "tool_name")
    name = joined(names, "lookup")  # (glued to "lookup_", an e-mail would be another one)
    args: dict[str, Any] = {key: {"found": True} for key in scenario.at("round", t, r, "arg_key")}
    args["query"] = joined(scenario.at("round", t, r, "arg_value"), "customer")
    for i, text in enumerate(scenario.at("round", t, r, "arg_signed_key")):
        args.setdefault(SIGNED_NAMES[i % len(SIGNED_NAMES)], {})[f"v{i}"] = text
    arguments = json.dumps(args, ensure_ascii=False)
    # A tool result is JSON text: its values may be written with \u escapes or URL-encoded.
    result = '{"status": "found", "detail": "' + joined(
        scenario.at("round", t, r, "result"), "record") + '"}'
    if method == "api":
        session.add_assistant(tool_calls=[ToolCall(call_id, name, arguments)])
        session.add_tool_result(call_id, result)
    elif method == "openai_chat":
        session.record([
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result}], format=method)
    elif method == "openai_responses":
        summary = joined(scenario.at("round", t, r, "reasoning"), "Looking the customer up.")
        session.record([
            {"type": "reasoning", "id": f"rs_{t}_{r}", "encrypted_content": seal("opaque"),
             "summary": [{"type": "summary_text", "text": summary}]},
            {"type": "function_call", "call_id": call_id, "name": name,
             "arguments": arguments},
            {"type": "function_call_output", "call_id": call_id, "output": result}],
            format=method)
    else:
        thinking = joined(scenario.at("round", t, r, "thinking"), "The user wants a lookup.")
        session.record([
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": thinking, "signature": sign(thinking)},
                {"type": "tool_use", "id": call_id, "name": name, "input": args}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": result}]}],
            format=method)


def record_scenario(session: ChatSession, scenario: Scenario) -> None:
    for t, turn in enumerate(scenario.turns):
        record_user(session, scenario, t)
        for r in range(len(turn.rounds)):
            record_round(session, scenario, t, r)
        if turn.assistant is not None:
            record_assistant(session, scenario, t)
        if scenario.system_after == t:
            session.add_system(joined(scenario.at("system"), "Policy: be brief."))


# -- running it -------------------------------------------------------------------------




@contextlib.contextmanager
def world_for(model_written: list[str]) -> Iterator[World]:
    """One world per example (a fresh SQLite file), closed when the example ends."""
    with tempfile.TemporaryDirectory(prefix="egress-") as folder:
        world = open_world(Path(folder), model_written, budget=BUDGET)
        try:
            yield world
        finally:
            world.keep.close()
            world.server.stop()


def drive(world: World, scenario: Scenario) -> list[tuple[str, str]]:
    """Record the scenario, run every path that sends, and return what left (besides the
    server's record): each built history."""
    keep = world.keep
    subject = None if scenario.subject is None else Ref(
        "customer", scenario.values[scenario.subject])
    session = keep.sessions.create(ORG, ACTOR, subject)
    record_scenario(session, scenario)
    out: list[tuple[str, str]] = []
    if scenario.distil_first:  # the sweep got there before the next turn
        keep.memory.distil(session.id)
    for fmt in scenario.formats:
        history = keep.compressor.build_history(session, SYSTEM, format=fmt)  # type: ignore[call-overload]
        out.append((f"build_history({fmt})", sent_history(history)))
    keep.memory.distil(session.id)
    keep.memory.recall(session, query=user_text(scenario, scenario.recall_from))
    later = keep.sessions.create(ORG, ACTOR, subject)
    later.add_user("Hello again, what do you know about me?")
    history = keep.compressor.build_history(later, SYSTEM,  # type: ignore[call-overload]
                                            format=scenario.later_format)
    out.append((f"later build_history({scenario.later_format})", sent_history(history)))
    return out


@PROPERTY
@given(scenario=scenarios())
def test_no_raw_value_leaves_by_any_path(scenario: Scenario) -> None:
    with world_for(scenario.model_written) as world:
        histories = drive(world, scenario)
    bodies = [(f"request {i}", body) for i, body in enumerate(world.server.bodies())]
    assert_never_raw([*bodies, *histories], scenario.values)
    # Every path ran: a fold by the summarizer, the distiller, the embedding endpoint.
    assert "summary" in world.player.asked, world.player.asked
    assert "extract" in world.player.asked, world.player.asked
    assert world.server.embedding_requests
    assert "Contact detail: <" in histories[-1][1], "memories must be recalled"
    assert world.server.rejected == []


# -- an Agents SDK run -------------------------------------------------------------------


def tool_output(forms: list[tuple[str, str]]) -> str:
    """What the tool answers: JSON text holding the drawn values in their drawn forms
    (escapes written into the text, as a serializer would)."""
    fields = ", ".join(f'"v{i}": "{written(POOLS[kind][0], form)}"'
                       for i, (kind, form) in enumerate(forms))
    return '{"forecast": "18C and sunny", ' + fields + "}"


@PROPERTY
@given(in_tool=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(ALL_FORMS)),
                        min_size=1, max_size=6),
       later=st.tuples(st.sampled_from(KINDS), st.sampled_from(ALL_FORMS)),
       model_api=st.sampled_from(["responses", "chat"]))
def test_an_agents_sdk_run_sends_no_raw_value(tmp_path_factory: pytest.TempPathFactory,
                                              in_tool: list[tuple[str, str]],
                                              later: tuple[str, str], model_api: str) -> None:
    """``session.run``: the run's first request (its new input, before the session stores
    it), the tool loop (the tool's output holds the values escaped, encoded, in any case)
    and a second run replaying the first: no raw value in any request."""
    values = {kind: POOLS[kind][0] for kind in KINDS}
    output = tool_output(in_tool)

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city, and who asked for it."""
        return output

    url = f"sqlite:///{tmp_path_factory.mktemp('agents') / 'chat.db'}"
    server = FakeOpenAIServer(responder=AgentModel(reasoning=True).openai).start()
    first = (f"My name is {values['name']}. Mail {values['email']} or call {values['phone']}; "
             f"SSN {values['ssn']}, card {values['card']}, IBAN {values['iban']}. "
             "What is the weather in Paris?")
    second = f"Ask for {written(values[later[0]], later[1])}. What is the weather in Rome?"

    async def scenario() -> None:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        model: Any = (OpenAIResponsesModel if model_api == "responses"
                      else OpenAIChatCompletionsModel)(model="gpt-x", openai_client=client)
        agent = Agent(name="weather", instructions="Answer weather questions with the tool.",
                      tools=[get_weather], model=model)
        async with AsyncChatkeep(url, model=client,
                                 config={"privacy": {"anonymize_pii": True}}) as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG, actor=ACTOR)
            await session.run(agent, first)
            await session.run(agent, second)

    try:
        asyncio.run(scenario())
        bodies = server.bodies()
    finally:
        server.stop()
    assert len(bodies) >= 4, "two runs, each with a tool call"
    assert_never_raw([(f"request {i}", b) for i, b in enumerate(bodies)], values)
    assert any("<EMAIL_1>" in b for b in bodies)
    assert server.rejected == []


# -- leaks the property finds (minimal reproductions) ------------------------------------


def test_an_escaped_copy_beside_the_plain_value_in_one_text(tmp_path: Path) -> None:
    with Chatkeep(f"sqlite:///{tmp_path / 'chat.db'}", dispatcher="inline",
                  config={"privacy": {"anonymize_pii": True}}) as keep:
        session = keep.sessions.create(ORG)
        session.add_user("Note ana.garcia@example.com please. "
                         "ana\\u002egarcia\\u0040example\\u002ecom")
        history = keep.compressor.build_history(session, SYSTEM)
    assert_never_raw([("build_history", sent_history(history))],
                     {"email": "ana.garcia@example.com"})


def test_the_recall_query_of_a_history_knows_what_that_history_learns(
        tmp_path: Path) -> None:
    world = open_world(tmp_path, [], budget=BUDGET)
    try:
        session = world.keep.sessions.create(ORG, ACTOR)
        session.add_user("By the way, my name is Margarethe Vandenberghe.")
        session.add_assistant("Noted.")
        session.add_user("Please ask for Margarethe Vandenberghe at the desk.")
        history = world.keep.compressor.build_history(session, SYSTEM)
        assert "Please ask for <PERSON_1> at the desk." in sent_history(history)
        assert world.server.embedding_requests, "the recall query was embedded"
        assert_never_raw([(f"request {i}", b) for i, b in enumerate(world.server.bodies())],
                         {"name": "Margarethe Vandenberghe"})
    finally:
        world.keep.close()
        world.server.stop()

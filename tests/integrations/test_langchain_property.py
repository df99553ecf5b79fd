"""LangChain by construction (issue 30): two properties over whole agent runs.

**Nothing raw leaves.** Hypothesis places the six value kinds of the core property test
(``egress_helpers``: an e-mail, a phone, an SSN, a card, an IBAN, a name) in random part
types of a ``create_agent`` conversation whose model talks Chat Completions over HTTP to
the strict fake server (``langchain_wire.WireChatModel``), each copy in a random surface
form (as typed, upper or lower case, JSON-escaped, URL-encoded):

* human text, and a human message of content blocks;
* the system prompt's second content block;
* tool results: text, a structured (dict) return under any key names, a
  ``content_and_artifact`` tool's content (its artifact never goes to a model);
* a run interrupted before its tools (``interrupt_before``) and resumed;
* a streamed run (``stream_mode="messages"``, through ``ChatkeepMiddleware.restored``).

Each value is also written plain once in the first message (where any path learns it,
as in the core property test). Every byte the server receives must be free of any raw or
normalised form of every value.

**No tenant's text in another's session.** Random interleavings of two tenants over
shared thread ids, two shared checkpointers and runs without one: after every step, no
session of a tenant holds the other's text and no model request of a tenant's run
carried it. A ``ForeignThreadState`` refusal is an acceptable outcome; a leak is not.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_wire import WireChatModel
from langgraph.checkpoint.memory import InMemorySaver
from test_langchain import WeatherModel

from chatkeep import Chatkeep, Ref
from chatkeep.errors import ForeignThreadState
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.testing import FakeOpenAIServer, Reply

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "privacy"))
from egress_helpers import FORMS, KINDS, POOLS, assert_never_raw, written

ORG = Ref("organization", 1)
SLOTS = ("human_text", "human_blocks", "system_blocks", "tool_text", "tool_struct",
         "tool_artifact", "resumed", "streamed")
KEYS = ("signature", "type", "role", "encrypted_content", "name", "text", "note")
INTRO = {"email": "My e-mail is {v}.", "phone": "Call me on {v}.", "ssn": "My SSN is {v}.",
         "card": "My card is {v}.", "iban": "My IBAN is {v}.", "name": "My name is {v}."}
#: No shrinking: an example is a whole conversation (its failure prints it as drawn).
PROPERTY = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@dataclass
class Scenario:
    values: dict[str, str]
    copies: dict[str, list[str]]  # slot -> texts, each a value in some surface form
    keys: list[str]

    def joined(self, slot: str, lead: str) -> str:
        return " ".join([lead, *self.copies.get(slot, [])])


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    values = {kind: draw(st.sampled_from(POOLS[kind])) for kind in KINDS}
    copies: dict[str, list[str]] = {}
    for value in values.values():
        for slot in draw(st.lists(st.sampled_from(SLOTS), min_size=1, max_size=4,
                                  unique=True)):
            copies.setdefault(slot, []).append(written(value, draw(st.sampled_from(FORMS))))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    return Scenario(values, copies, keys)


def responder(ids: itertools.count[int]) -> Any:
    """The model: a user turn naming a tool is answered with calls of it, a tool result
    with a text answer that writes the session's first e-mail placeholder, anything else
    likewise."""

    def answer(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        turn = list(itertools.takewhile(lambda m: m["role"] == "user", reversed(messages)))
        text = json.dumps([m.get("content") for m in turn])
        if turn:
            wanted = [name for name in ("lookup", "lookup_struct", "fetch_file", "resume_tool")
                      if name in text]
            if wanted:
                return Reply.calls(*[(f"call_{next(ids)}", name, json.dumps({"q": "x"}))
                                     for name in wanted])
        return Reply.ok("Noted, I will write to <EMAIL_1> as asked.")

    return answer


def run_scenario(scenario: Scenario, url: str, server: FakeOpenAIServer) -> str:
    """The conversation of one scenario; returns what the user was shown, streamed."""

    @tool
    def lookup(q: str) -> str:
        """Look a customer up."""
        return scenario.joined("tool_text", "Customer record:")

    @tool
    def lookup_struct(q: str) -> dict[str, Any]:
        """Look a customer up, as fields."""
        texts = scenario.copies.get("tool_struct", []) or ["none"]
        return {key: " ".join(texts) for key in scenario.keys}

    @tool(response_format="content_and_artifact")
    def fetch_file(q: str) -> tuple[str, dict[str, Any]]:
        """Fetch the customer's file."""
        return scenario.joined("tool_artifact", "File:"), {"values": scenario.values}

    @tool
    def resume_tool(q: str) -> str:
        """Runs after a human approved it."""
        return scenario.joined("resumed", "Approved:")

    tools = [lookup, lookup_struct, fetch_file, resume_tool]
    system = SystemMessage(content=[
        {"type": "text", "text": "You are a support assistant."},
        {"type": "text", "text": scenario.joined("system_blocks", "Escalations:")}])
    intro = " ".join(INTRO[k].format(v=v) for k, v in scenario.values.items())
    model = WireChatModel(base_url=server.base_url)
    saver = InMemorySaver()
    thread: RunnableConfig = {"configurable": {"thread_id": "prop"}}
    with Chatkeep(url, config={"privacy": {"anonymize_pii": True}},
                  dispatcher="inline") as keep:
        middleware = ChatkeepMiddleware(keep, tenant=ORG)
        graph: Any = create_agent(model, tools, system_prompt=system,
                                  middleware=[middleware], checkpointer=saver)
        graph.invoke({"messages": [
            HumanMessage(scenario.joined("human_text", intro) +
                         " Please lookup, lookup_struct and fetch_file."),
            HumanMessage(content=[{"type": "text", "text": "Also:"},
                                  {"type": "text",
                                   "text": scenario.joined("human_blocks", "notes")}])]},
            thread)
        paused: Any = create_agent(model, tools, system_prompt=system,
                                   middleware=[middleware], checkpointer=saver,
                                   interrupt_before=["tools"])
        paused.invoke({"messages": [HumanMessage("Now resume_tool please.")]}, thread)
        paused.invoke(None, thread)
        shown = []
        for chunk, _ in middleware.restored(
                graph.stream({"messages": [HumanMessage(
                    scenario.joined("streamed", "One more thing:"))]}, thread,
                    stream_mode="messages"), thread):
            if isinstance(chunk, AIMessageChunk) and isinstance(chunk.content, str):
                shown.append(chunk.content)
        return "".join(shown)


@PROPERTY
@given(scenario=scenarios())
def test_no_raw_value_reaches_the_model_from_any_langchain_part(scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory() as folder, \
            FakeOpenAIServer(responder(itertools.count())) as server:
        shown = run_scenario(scenario, f"sqlite:///{Path(folder) / 'chat.db'}", server)
        assert not server.rejected, server.rejected
        bodies = server.bodies()
        assert len(bodies) >= 5
        assert_never_raw([(f"request {i}", body) for i, body in enumerate(bodies)],
                         scenario.values)
        # What the user is shown carries their own value, not the placeholder.
        assert "<EMAIL_1>" not in shown and scenario.values["email"] in shown.lower()


# -- tenancy -------------------------------------------------------------------------------

TENANTS = (Ref("organization", 7), Ref("organization", 8))
Step = tuple[int, str, int | None]  # tenant index, thread id, checkpointer (None: none)
steps = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(("t1", "t2")),
                           st.sampled_from((0, 1, None))), min_size=2, max_size=9)
TENANCY = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                   phases=(Phase.explicit, Phase.generate),
                   suppress_health_check=[HealthCheck.too_slow])


def marker(tenant: int) -> str:
    return f"confidential-of-tenant-{7 + tenant}"


@TENANCY
@given(plan=steps)
def test_no_session_ever_holds_another_tenants_text(plan: list[Step]) -> None:
    model = WeatherModel()
    savers = (InMemorySaver(), InMemorySaver())
    with tempfile.TemporaryDirectory() as folder, \
            Chatkeep(f"sqlite:///{Path(folder) / 'chat.db'}", dispatcher="inline") as keep:
        agents = {saver: create_agent(model, [], middleware=[ChatkeepMiddleware(keep)],
                                      checkpointer=None if saver is None else savers[saver])
                  for saver in (0, 1, None)}
        for n, (tenant, thread, saver) in enumerate(plan):
            before = len(model.seen)
            try:
                agents[saver].invoke(
                    {"messages": [{"role": "user", "content": f"{marker(tenant)} step {n}"}]},
                    {"configurable": {"thread_id": thread}},
                    context={"tenant": TENANTS[tenant]})
            except ForeignThreadState:
                assert len(model.seen) == before  # refused before any model call
            other = marker(1 - tenant)
            for request in model.seen[before:]:
                assert other not in json.dumps([m.content for m in request])
            for index, ref in enumerate(TENANTS):
                for session in keep.sessions.list(ref):
                    text = json.dumps([m.content for m in session.read_messages()])
                    assert marker(1 - index) not in text, (plan[:n + 1], text)

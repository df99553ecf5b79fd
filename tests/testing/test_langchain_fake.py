"""``ToolCallingFakeModel`` runs a LangChain v1 agent with tools offline (issue 35, item 4):
``create_agent`` binds its tools (langchain-core's ``GenericFakeChatModel`` refuses), the
tool loop runs through chatkeep's middleware, and a second run on the same thread and
store gets fresh tool call ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from chatkeep import Chatkeep, Ref
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.testing.langchain import ToolCallingFakeModel, tool_calls

ORG = Ref("organization", 3)


@tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"{city}: 18C and sunny"


def weather(sent: list[BaseMessage]) -> AIMessage:
    """Ask for the weather when the user asks; answer from the tool's result after."""
    last = sent[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"It is {last.content}")
    assert isinstance(last, HumanMessage)
    return tool_calls(("get_weather", {"city": str(last.content).split()[-1]}))


def test_generic_fake_chat_model_cannot_bind_tools() -> None:
    agent = create_agent(GenericFakeChatModel(messages=iter(["hi"])), [get_weather])
    with pytest.raises(NotImplementedError):
        agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris"}]})


def test_an_agent_with_tools_runs_twice_on_one_thread(tmp_path: Path) -> None:
    model = ToolCallingFakeModel(respond=weather)
    with Chatkeep(f"sqlite:///{tmp_path / 'chat.db'}") as keep:
        agent = create_agent(model, [get_weather], system_prompt="Use get_weather.",
                             middleware=[ChatkeepMiddleware(keep, tenant=ORG)])
        config: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
        for city in ("Paris", "Rome"):
            out = agent.invoke({"messages": [{"role": "user",
                                              "content": f"Weather in {city}"}]}, config)
            assert out["messages"][-1].content == f"It is {city}: 18C and sunny"
        assert model.bound_tools == ["get_weather"]
        assert len(model.requests) == 4  # a call and an answer per question
        session = keep.sessions.by_key("t-1", ORG)
        stored = session.read_messages()
        ids = [c.id for m in stored for c in (m.tool_calls or ())]
        assert len(ids) == 2 and len(set(ids)) == 2  # each call id used once


def test_a_script_answers_in_order_and_tool_calls_get_fresh_ids() -> None:
    model = ToolCallingFakeModel(messages=iter(["first", AIMessage("second")]))
    assert model.invoke("a").content == "first"
    assert model.invoke("b").content == "second"
    assert [str(r[0].content) for r in model.requests] == ["a", "b"]
    one = tool_calls(("f", {"x": 1}), ("g", {}))
    two = tool_calls(("f", {"x": 1}))
    ids = [c["id"] for c in (*one.tool_calls, *two.tool_calls)]
    assert len(set(ids)) == 3
    assert [c["name"] for c in one.tool_calls] == ["f", "g"]
    assert model.bind_tools([{"type": "function", "function": {"name": "h"}}]) is model
    assert model.bound_tools == ["h"]

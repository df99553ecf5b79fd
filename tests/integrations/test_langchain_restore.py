"""What the user sees (issue 30, item 10): with privacy on, the model writes placeholders;
the graph state, the app's display and streamed text carry the user's own values, while
every request the model server receives stays redacted."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_wire import WireChatModel
from langgraph.checkpoint.memory import InMemorySaver

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import ConfigError
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 3)
PRIVATE = {"privacy": {"anonymize_pii": True}}
EMAIL, PHONE = "ana.garcia@example.com", "+44 7911 123456"
ASK = f"Please mail {EMAIL} or call {PHONE}, then confirm."
ANSWER = "Done: I wrote to <EMAIL_1> and will call <PHONE_1> tomorrow."
SHOWN = f"Done: I wrote to {EMAIL} and will call {PHONE} tomorrow."
sent_to: list[str] = []


@tool
def send_mail(to: str) -> str:
    """Send the confirmation mail."""
    sent_to.append(to)
    return f"sent to {to}"


def server_for() -> FakeOpenAIServer:
    """A model that asks to mail the placeholder it was shown, then answers in
    placeholders; the fake server streams each text in pieces that cut them."""
    ids = itertools.count()

    def answer(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "user" and "mail" in str(last.get("content")):
            return Reply.calls((f"call_{next(ids)}", "send_mail",
                                json.dumps({"to": "<EMAIL_1>"})))
        return Reply.ok(ANSWER)

    return FakeOpenAIServer(answer)


def texts(items: list[Any]) -> str:
    return "".join(str(chunk.content) for chunk, _ in items
                   if isinstance(chunk, AIMessageChunk | AIMessage))


def check_redacted(server: FakeOpenAIServer) -> None:
    assert server.bodies() and not server.rejected
    for body in server.bodies():
        assert EMAIL not in body and "7911" not in body
    assert any("<EMAIL_1>" in body for body in server.bodies())


def test_invoke_and_stream_show_real_values_while_the_model_sees_placeholders(
        db_url: str) -> None:
    sent_to.clear()
    thread: RunnableConfig = {"configurable": {"thread_id": "shown"}}
    with server_for() as server, Chatkeep(db_url, config=PRIVATE,
                                           dispatcher="inline") as keep:
        middleware = ChatkeepMiddleware(keep, tenant=ORG)
        graph: Any = create_agent(WireChatModel(base_url=server.base_url), [send_mail],
                                  middleware=[middleware], checkpointer=InMemorySaver())
        out = graph.invoke({"messages": [{"role": "user", "content": ASK}]}, thread)
        # The state (what the app displays) and the tool got the real values.
        assert out["messages"][-1].content == SHOWN
        assert out["messages"][1].tool_calls[0]["args"] == {"to": EMAIL}
        assert sent_to == [EMAIL]
        assert isinstance(out["messages"][2], ToolMessage)
        # Streamed: the chunks cut the placeholders; restored, the user reads the values.
        raw = list(graph.stream({"messages": [{"role": "user", "content": "Thanks!"}]},
                                thread, stream_mode="messages"))
        assert "<EMA" in texts(raw) and texts(raw) != SHOWN  # what the model streamed
        shown = list(middleware.restored(iter(raw), thread))
        assert texts(shown) == SHOWN
        assert all("<" not in str(c.content) for c, _ in shown if isinstance(c, AIMessageChunk))
        # Multi-mode streams: only the messages part is touched.
        both = list(middleware.restored(
            graph.stream({"messages": [{"role": "user", "content": "Again?"}]}, thread,
                         stream_mode=["messages", "updates"]), thread))
        assert texts([p for mode, p in both if mode == "messages"]) == SHOWN
        assert any(mode == "updates" for mode, _ in both)
        stored = keep.sessions.by_key("shown", ORG).read_messages()
        assert stored[-1].content == SHOWN
    check_redacted(server)


def test_async_stream_restored(db_url: str) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": "ashown"}}

    async def scenario(server: FakeOpenAIServer) -> tuple[str, str]:
        async with AsyncChatkeep(db_url, config=PRIVATE, dispatcher="inline") as keep:
            middleware = ChatkeepMiddleware(keep)
            graph: Any = create_agent(WireChatModel(base_url=server.base_url), [send_mail],
                                      middleware=[middleware], checkpointer=InMemorySaver())
            context = {"tenant": ORG}
            out = await graph.ainvoke({"messages": [{"role": "user", "content": ASK}]},
                                      thread, context=context)
            shown = [item async for item in middleware.arestored(
                graph.astream({"messages": [{"role": "user", "content": "Thanks!"}]},
                              thread, context=context, stream_mode="messages"),
                thread, context=context)]
            with pytest.raises(ConfigError, match="astream"):
                list(middleware.restored(iter(()), thread, context=context))
            return str(out["messages"][-1].content), texts(shown)

    with server_for() as server:
        final, streamed = asyncio.run(scenario(server))
    assert final == SHOWN and streamed == SHOWN
    check_redacted(server)


def test_restore_output_off_keeps_the_models_placeholders(db_url: str) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": "raw"}}
    with server_for() as server, Chatkeep(db_url, config=PRIVATE,
                                           dispatcher="inline") as keep:
        graph: Any = create_agent(
            WireChatModel(base_url=server.base_url), [],
            middleware=[ChatkeepMiddleware(keep, tenant=ORG, restore_output=False)])
        out = graph.invoke({"messages": [{"role": "user", "content": "Hello Ana, "
                                          f"{EMAIL}"}]}, thread)
        assert out["messages"][-1].content == ANSWER
        # The record keeps the real values all the same.
        assert EMAIL in str(keep.sessions.by_key("raw", ORG).read_messages()[-1].content)
    with pytest.raises(ConfigError):
        ChatkeepMiddleware("x", restore_output=True)  # type: ignore[arg-type]

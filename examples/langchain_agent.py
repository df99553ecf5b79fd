"""A LangChain v1 agent whose conversation and long-term memory chatkeep keeps.

``create_agent`` with :class:`ChatkeepMiddleware`: every model call gets the thread's
budgeted history from chatkeep (summary, recent turns, the open tool turn whole, redacted
when the session redacts), while LangGraph's own state and checkpointer stay as they are.
:class:`ChatkeepStore` is the agent's LangGraph store, over chatkeep's memories, which
the middleware recalls into the system message.

Runs offline: ``OfflineWeatherModel`` (a langchain-core fake chat model) stands in for
``init_chat_model("openai:gpt-4o")``; pass your own model to ``main``. The test suite runs
this file, and ``mypy --strict`` checks it.

    python examples/langchain_agent.py
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from chatkeep import Chatkeep, Ref
from chatkeep.integrations.langchain import ChatkeepMiddleware, ChatkeepStore, namespace_of

SYSTEM = "You are a weather assistant. Use get_weather for every city asked about."
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}
ORG, USER = Ref("organization", 7), Ref("user", 3)
THREAD = "trip-planning"
BUDGET = 180
QUESTIONS = [
    "What is the weather in Paris? I fly there on Monday.",
    "And in Rome and Oslo? I may go on from Paris.",
    "Which of the three is warmest, would you say?",
    "What is the weather in Oslo again?",
    "Thanks, and Paris once more before I pack?",
    "Great, that is all for today.",
]


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return WEATHER.get(city, "unknown")


class OfflineWeatherModel(GenericFakeChatModel):
    """A stand-in chat model: calls ``get_weather`` for every city a question names (in
    parallel), answers with the tools' results, and echoes anything else. It keeps the
    size of every request it was sent."""

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    ids: Iterator[int] = Field(default_factory=itertools.count)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> OfflineWeatherModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.requests.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            results: list[str] = []
            for message in reversed(messages):
                if not isinstance(message, ToolMessage):
                    break
                results.insert(0, str(message.content))
            answer = AIMessage("; ".join(results))
        else:
            cities = [c for c in WEATHER if c in str(last.text)]
            answer = AIMessage("", tool_calls=[
                {"name": "get_weather", "args": {"city": c}, "id": f"call_{next(self.ids)}",
                 "type": "tool_call"} for c in cities]) if cities else \
                AIMessage(f"Noted: {str(last.text)[:40]}")
        self.messages = iter([answer])
        return super()._generate(messages, stop, run_manager, **kwargs)


def main(database_url: str = "sqlite:///langchain_agent.db",
         model: BaseChatModel | None = None) -> dict[str, Any]:
    """Six questions on one thread; returns what the run shows about chatkeep's part."""
    chat_model = model or OfflineWeatherModel()
    settings = {"chat": {"max_history_tokens": BUDGET, "recent_messages_min": 2,
                         "summary_max_tokens": 40},
                "memory": {"recall_in_history": True}}
    with Chatkeep(database_url, config=settings) as keep:
        store = ChatkeepStore(keep, tenant=ORG)
        store.put(namespace_of(ORG, "actor", USER), "new",
                  {"content": "Prefers temperatures in Celsius"})
        agent = create_agent(chat_model, [get_weather], system_prompt=SYSTEM,
                             middleware=[ChatkeepMiddleware(keep, tenant=ORG, actor=USER)],
                             checkpointer=InMemorySaver(), store=store)
        config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
        state: list[BaseMessage] = []
        for question in QUESTIONS:
            out = agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
            state = out["messages"]
            print(f"> {question}\n  {state[-1].content}")
        session = keep.sessions.by_key(THREAD, ORG)
        print(f"thread {THREAD!r}: {len(state)} messages in LangGraph's state, "
              f"{session.message_count} in chatkeep, summary through seq "
              f"{session.summary_watermark}")
        requests = getattr(chat_model, "requests", [])
        counter = keep.counter
        sizes = [sum(counter.count(str(m.text)) for m in request) for request in requests]
        first = requests[0][0] if requests else None
        return {"messages_in_thread": len(state), "messages_in_session": session.message_count,
                "summary_watermark": session.summary_watermark,
                "max_request_tokens": max(sizes, default=0), "budget": BUDGET,
                "first_system_message": str(first.text)
                if isinstance(first, SystemMessage) else ""}


if __name__ == "__main__":
    main(sys.argv[1]) if len(sys.argv) > 1 else main()

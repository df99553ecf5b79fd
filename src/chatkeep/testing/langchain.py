"""A LangChain fake chat model that ``create_agent`` accepts (``chatkeep[langchain]``).

langchain-core's ``GenericFakeChatModel`` has no ``bind_tools``, so an agent built with
tools refuses it, and every test of an agent writes the same subclass. :class:`ToolCallingFakeModel`
is that subclass: it binds tools (recording their names), answers from a script or from a
function of what it was sent, and keeps every request; :func:`tool_calls` builds the
answer that asks for tools, each call with an id never used before (a reused id breaks
the second run of an agent over the same store)::

    model = ToolCallingFakeModel(respond=lambda sent: tool_calls(("get_weather", {"city": "Paris"}))
                          if isinstance(sent[-1], HumanMessage) else AIMessage("18C"))
    agent = create_agent(model, tools=[get_weather], middleware=[ChatkeepMiddleware(keep)])
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

__all__ = ["ToolCallingFakeModel", "tool_calls"]

#: What answers a request: the messages sent in, the model's message (or text) out.
Respond = Callable[[list[BaseMessage]], AIMessage | str]


def tool_calls(*calls: tuple[str, Mapping[str, Any]], text: str = "") -> AIMessage:
    """An assistant message asking for ``calls`` (``(tool_name, arguments)``), in
    parallel, each with a fresh id."""
    return AIMessage(content=text, tool_calls=[
        {"name": name, "args": dict(args), "id": f"call_{uuid.uuid4().hex[:16]}",
         "type": "tool_call"} for name, args in calls])


class ToolCallingFakeModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` with ``bind_tools``: answers with ``respond(sent)`` when
    given, else the next of ``messages``; keeps every request in ``requests`` and the
    names of the tools it was bound to in ``bound_tools``."""

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    respond: Respond | None = None
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[str] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFakeModel:
        """Record the tools' names; the model itself answers (what it answers is up to
        ``respond`` or the script), as a real model would after binding."""
        self.bound_tools = [_tool_name(tool) for tool in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.requests.append(list(messages))
        if self.respond is not None:
            self.messages = iter([self.respond(list(messages))])
        return super()._generate(messages, stop, run_manager, **kwargs)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        return str(function.get("name") if isinstance(function, Mapping)
                   else tool.get("name"))
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", tool))

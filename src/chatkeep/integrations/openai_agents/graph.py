"""The agents a run of a :class:`ChatkeepSession` reaches, prepared for that run.

``session.run*`` hand the SDK a clone of the starting agent, and of every agent it reaches
through its handoffs (recursively, each once: cycles are fine), never changing the
caller's objects:

* each function tool receives the model's arguments with the session's placeholders put
  back (``restore`` over the parsed JSON), so a tool acts on the user's real values
  (issue 30); what it returns still leaves only through the run's egress. A handoff's
  arguments (``handoff(..., input_type=...)``) reach its ``on_handoff`` restored the same
  way. An agent run as a tool (``agent.as_tool``, or the SDK's Codex tool) keeps the
  arguments as the model wrote them: it is a model, and the SDK runs its input guardrails
  on that input before any filter (the nested agent is the one passed to ``as_tool``,
  which a run cannot clone, so its own function tools get placeholders too);
* each model object is wrapped (``wrap_model``: the quota reservation of every request,
  :mod:`.reserving`).

The SDK is imported by the caller: this module touches only the attributes the SDK's
``Agent``, ``FunctionTool`` and ``Handoff`` document (and a handoff's ``_agent_ref``,
read and kept, so the SDK still finds the target it announces).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents import Agent

#: Puts the session's placeholders back into a JSON-like value.
RestorePayload = Callable[[Any], Awaitable[Any]]

__all__ = ["RunAgents", "restored_arguments"]

#: Marks an agent this module made (a run resumed from a state holds them already).
_PREPARED = "_chatkeep_prepared"


async def restored_arguments(arguments: str, restore: RestorePayload) -> str:
    """A tool call's JSON ``arguments`` with the placeholders put back (parsed, restored,
    written again); text that is not JSON is restored as one string."""
    if "<" not in arguments:  # no placeholder in it: as the model wrote it
        return arguments
    try:
        value = json.loads(arguments)
    except ValueError:
        restored: str = await restore(arguments)
        return restored
    return json.dumps(await restore(value), ensure_ascii=False)


class RunAgents:
    """Clones of the agents one run reaches (see the module): ``restore`` (``None``: tools
    get the model's arguments as written) and ``wrap_model`` (``None``: models as they
    are)."""

    def __init__(self, restore: RestorePayload | None,
                 wrap_model: Callable[[Any], Any] | None) -> None:
        self.restore = restore
        self.wrap_model = wrap_model
        self._clones: dict[int, Agent[Any]] = {}
        self._originals: list[Any] = []  # kept alive, so no id is reused during the run

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """``agent``'s clone for this run (made once; an agent already prepared as is)."""
        if getattr(agent, _PREPARED, False):
            return agent
        known = self._clones.get(id(agent))
        if known is not None:
            return known
        clone = agent.clone()
        self._clones[id(agent)] = clone
        self._originals.append(agent)
        setattr(clone, _PREPARED, True)
        from agents.models.interface import Model

        if self.wrap_model is not None and isinstance(agent.model, Model):
            clone.model = self.wrap_model(agent.model)
        clone.tools = [self.tool(tool) for tool in agent.tools]
        clone.handoffs = [self.handoff(item) for item in agent.handoffs]
        return clone

    def tool(self, tool: Any) -> Any:
        """A function tool whose invocation gets restored arguments (any other tool, or
        every tool when nothing restores, as it is)."""
        from agents import FunctionTool

        if self.restore is None or not isinstance(tool, FunctionTool) or \
                getattr(tool, "_is_agent_tool", False) or getattr(tool, "_is_codex_tool", False):
            return tool  # an agent run as a tool is a model: it reads placeholders
        restore = self.restore
        copied = copy.copy(tool)  # the SDK's own copy: its error handling bound to the copy
        original = copied.on_invoke_tool

        # ``wraps`` keeps the original's signature (``__wrapped__``): the SDK picks the
        # context it passes (a ToolContext or its plain run context) from it.
        @functools.wraps(original, updated=())
        async def invoke(context: Any, arguments: str) -> Any:
            return await original(context, await restored_arguments(arguments, restore))

        copied.on_invoke_tool = invoke
        return copied

    def handoff(self, item: Any) -> Any:
        """A handoff whose target is this run's clone, its arguments restored."""
        from agents import Agent, Handoff

        if isinstance(item, Agent):
            return self.agent(item)
        if not isinstance(item, Handoff):
            return item
        original = item.on_invoke_handoff
        restore = self.restore

        async def invoke(context: Any, arguments: str) -> Any:
            if restore is not None:
                arguments = await restored_arguments(arguments, restore)
            return self.agent(await original(context, arguments))

        replaced = dataclasses.replace(item, on_invoke_handoff=invoke)
        reference = getattr(item, "_agent_ref", None)
        target = reference() if callable(reference) else None
        if target is not None:
            replaced._agent_ref = weakref.ref(self.agent(target))
        return replaced

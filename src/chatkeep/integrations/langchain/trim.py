"""Which messages of a LangGraph thread's state may go: plain code over values.

With ``ChatkeepMiddleware(..., trim_state=True)`` the thread's state keeps only what
chatkeep has not folded into the session's summary yet, so a checkpointer of the user's
own (``InMemorySaver``, ``SqliteSaver``, ``PostgresSaver``) writes a bounded state at
every step instead of the whole, ever-growing thread. The session holds every message;
the state is a window on its unfolded end.

What stays, always:

* the current turn: from the state's last human message on (the open turn, a tool call
  still waiting for its results, what an interrupt such as ``HumanInTheLoopMiddleware``
  reads and resumes);
* every message not recorded, or recorded after the summary's watermark;
* a tool call and its results together: they go only when all of them are folded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

__all__ = ["folded_ids", "settled"]


def settled(state: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages of ``state`` before its current turn (the last human message and
    what follows it): the only ones trimming may remove. No human message: none."""
    for index in range(len(state) - 1, -1, -1):
        if isinstance(state[index], HumanMessage):
            return list(state[:index])
    return []


def folded_ids(state: Sequence[BaseMessage], unfolded: set[str],
               recorded: Callable[[list[str]], set[str]]) -> list[str]:
    """The ids of the messages of ``state`` (oldest first) that can leave it: before its
    current turn, recorded (``recorded`` says which of a list of ids the session holds)
    and folded (not in ``unfolded``, the ids the session holds after its summary's
    watermark), a tool call only with every result it has in the state, and the other
    way round. ``recorded`` is asked only when some message may go."""
    head = settled(state)
    candidates = [m.id for m in head if m.id and m.id not in unfolded]
    if not candidates:
        return []
    gone = recorded(candidates)
    groups = _groups(head)
    return [m.id for m in head if m.id and all(
        member.id in gone for member in groups.get(m.id, [m]))]


def _groups(messages: Sequence[BaseMessage]) -> dict[str, list[BaseMessage]]:
    """Each tool call's message and its results, under each of their ids: they stay or go
    together."""
    callers: dict[str, list[BaseMessage]] = {}
    groups: dict[str, list[BaseMessage]] = {}
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls and message.id:
            group: list[BaseMessage] = [message]
            groups[message.id] = group
            for call in message.tool_calls:
                if call["id"]:
                    callers[call["id"]] = group
        elif isinstance(message, ToolMessage) and message.id:
            found = callers.get(message.tool_call_id)
            if found is not None:
                found.append(message)
                groups[message.id] = found
    return groups

"""The model of a turn: which messages are closed history and which are the open turn.

A **turn** starts at a user message. It is *open* while its last stored message is an
assistant message with tool calls or a tool result; the assistant's text answer
without tool calls closes it. The open turn goes to the model verbatim and complete
(every call with its result, reasoning and thinking payloads untouched); closed turns
contribute their user and assistant text only. Pure functions over values: no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chatkeep.errors import IncompleteToolTurn
from chatkeep.messages import Message, Role

log = logging.getLogger("chatkeep.history")


@dataclass(frozen=True, slots=True)
class TurnSplit:
    """Messages after the watermark, sorted into what replays how."""

    pinned: tuple[Message, ...]
    """System messages the application added: instructions, replayed pinned in order."""
    closed: tuple[Message, ...]
    """Closed turns' messages (plumbing included; only their text replays)."""
    current: tuple[Message, ...]
    """The last turn when it is not closed: a pending user message, or the open turn."""

    @property
    def open(self) -> bool:
        """Whether the current turn holds tool plumbing (it then goes verbatim)."""
        return any(m.is_plumbing for m in self.current)


def split_turns(messages: Sequence[Message]) -> TurnSplit:
    """Sort ``messages`` (in ``seq`` order) into pinned, closed and current."""
    pinned = tuple(m for m in messages if m.role is Role.SYSTEM)
    talk = [m for m in messages if m.role is not Role.SYSTEM]
    if not talk or (talk[-1].role is Role.ASSISTANT and not talk[-1].tool_calls):
        return TurnSplit(pinned, tuple(talk), ())
    start = max((i for i, m in enumerate(talk) if m.role is Role.USER), default=0)
    return TurnSplit(pinned, tuple(talk[:start]), tuple(talk[start:]))


def open_turn(current: Sequence[Message]) -> tuple[Message, ...]:
    """The open turn as it must go out: every call answered, results right after their
    call's message. Raises ``IncompleteToolTurn`` naming the calls still waiting.

    A tool result answering a call of an earlier (closed) turn is dropped: sent alone it
    is an orphan the APIs reject.
    """
    calls = [c.id for m in current for c in m.tool_calls]
    known = set(calls)
    answered = {m.tool_call_id for m in current if m.role is Role.TOOL}
    missing = [c for c in calls if c not in answered]
    if missing:
        raise IncompleteToolTurn(missing)
    kept = []
    for message in current:
        if message.role is Role.TOOL and message.tool_call_id not in known:
            log.info("session %s: tool result seq %d answers a call of an earlier turn; "
                     "not replayed", message.session_id, message.seq)
            continue
        kept.append(message)
    return tuple(kept)

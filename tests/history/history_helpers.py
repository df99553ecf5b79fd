"""What the history tests share: a budget that ten turns exceed, and turns to fill it."""

from __future__ import annotations

from chatkeep import Ref
from chatkeep.sessions import ChatSession

ORG = Ref("organization", 1)
SYSTEM = "You are a careful legal assistant."
BUDGET = {"chat": {"max_history_tokens": 1000, "recent_messages_min": 4,
                   "summary_max_tokens": 200, "summary_model": "cheap-model"},
          "memory": {"distil_on_compress": False}}


def fill(session: ChatSession, turns: int, start: int = 0) -> None:
    """``turns`` user/assistant pairs of ~80 tokens each: 10 turns are over the budget."""
    for i in range(start, start + turns):
        session.add_user(f"U{i} " + "question " * 40)
        session.add_assistant(f"A{i} " + "answer " * 40)

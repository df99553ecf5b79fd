"""Memory test helpers: a responder that plays the distiller's model, and small utilities."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

from chatkeep import Chatkeep, Ref
from chatkeep.memory.prompts import DECIDE_SYSTEM
from chatkeep.sessions import ChatSession
from chatkeep.testing import Reply

ORG = Ref("organization", 1)
OTHER_ORG = Ref("organization", 2)
ALICE = Ref("user", 10)
BOB = Ref("user", 11)
MATTER = Ref("matter", "M-100")
OTHER_MATTER = Ref("matter", "M-200")

Decide = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def add_all(new_facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The default decision: every fact is new."""
    return [{"fact": f["fact"], "event": "ADD"} for f in new_facts]


class Player:
    """Answers extraction requests from a queue of fact lists and decision requests with
    ``decide``; anything else (summaries) gets ``SUMMARY``. Records what it was asked."""

    def __init__(self) -> None:
        self.facts: deque[list[dict[str, str]]] = deque()
        self.decide: Decide = add_all
        self.extractions: list[dict[str, Any]] = []
        self.decisions: list[list[dict[str, Any]]] = []
        self.raw_extraction: deque[Reply] = deque()
        self.raw_decision: deque[Reply] = deque()

    def will_extract(self, *facts: tuple[str, str]) -> Player:
        self.facts.append([{"scope": scope, "content": content} for scope, content in facts])
        return self

    def __call__(self, body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        if system.startswith("You extract durable memories"):
            self.extractions.append(body)
            if self.raw_extraction:
                return self.raw_extraction.popleft()
            return Reply.json({"facts": self.facts.popleft() if self.facts else []},
                              prompt_tokens=100, completion_tokens=20)
        if system == DECIDE_SYSTEM:
            new_facts = json.loads(body["messages"][1]["content"])["new_facts"]
            self.decisions.append(new_facts)
            if self.raw_decision:
                return self.raw_decision.popleft()
            return Reply.json({"decisions": self.decide(new_facts)},
                              prompt_tokens=50, completion_tokens=10)
        return Reply.ok("SUMMARY", prompt_tokens=10, completion_tokens=5)


def talk(session: ChatSession, *turns: str) -> None:
    """Alternate user/assistant messages."""
    for n, text in enumerate(turns):
        if n % 2 == 0:
            session.add_user(text)
        else:
            session.add_assistant(text)


def remember(keep: Chatkeep, player: Player, session: ChatSession,
             *facts: tuple[str, str]) -> None:
    """Store ``facts`` through a real distillation of one more exchange."""
    talk(session, "note this", "noted")
    player.will_extract(*facts)
    keep.memory.distil(session.id)


def contents(memories: list[Any]) -> list[str]:
    return [m.content for m in memories]

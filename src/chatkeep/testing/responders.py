"""A responder for the fake servers that answers chatkeep's own calls apart from the app's.

A fake server's script is one queue: whichever request comes first takes the next reply,
so a test that scripts its agent's answers breaks the moment chatkeep folds a summary or
distils a memory in between. :class:`SplitResponder` tells the calls apart by their
system prompt (chatkeep's summary and distillation prompts are its own), keeps one script
per purpose, and answers chatkeep's calls with valid, small replies by default::

    responder = SplitResponder(app=AgentModel().openai)
    server = FakeOpenAIServer(responder=responder).start()
    responder.script("app", Reply.ok("Hello!"))        # only the app's calls take it
    ...
    assert responder.purposes == ["app", "summary", "app"]
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from chatkeep.errors import InvalidArgument
from chatkeep.history.summarizers.llm import SYSTEM_PROMPT as SUMMARY_SYSTEM
from chatkeep.memory.prompts import DECIDE_SYSTEM, EXTRACT_SYSTEM
from chatkeep.testing.fake_openai import Reply, Responder

#: What a request is for: the app's own model call, or one of chatkeep's.
Purpose = Literal["app", "summary", "distil", "decide"]
PURPOSES: tuple[Purpose, ...] = ("app", "summary", "distil", "decide")

#: How each of chatkeep's prompts begins (the text before its first placeholder).
_OPENINGS: dict[Purpose, str] = {
    "summary": SUMMARY_SYSTEM.split("{", 1)[0],
    "distil": EXTRACT_SYSTEM.split("{", 1)[0],
    "decide": DECIDE_SYSTEM.split("\n", 1)[0],
}
_TRANSCRIPT = "New part of the conversation:\n"


def purpose_of(body: Mapping[str, Any]) -> Purpose:
    """What a request body (Chat Completions, Responses or Anthropic Messages) is for,
    read from its system prompt: ``"summary"`` (a fold), ``"distil"`` (memory
    extraction), ``"decide"`` (memory update decisions), else ``"app"``."""
    system = _system_text(body)
    for purpose, opening in _OPENINGS.items():
        if system.startswith(opening):
            return purpose
    return "app"


def summary_reply(body: Mapping[str, Any]) -> Reply:
    """A valid summary edit that keeps the new part of the conversation as the narrative
    (clipped): deterministic, offline, and never empty."""
    prompt = _last_user_text(body)
    new = prompt.split(_TRANSCRIPT, 1)[-1].strip()
    narrative = " ".join(new.split())[:400] or "The conversation so far."
    return Reply.json({"add": [], "update": [], "retire": [], "narrative": narrative})


def distil_reply(body: Mapping[str, Any]) -> Reply:
    """An extraction that learns nothing (``{"facts": []}``)."""
    return Reply.json({"facts": []})


def decide_reply(body: Mapping[str, Any]) -> Reply:
    """Every new fact added as it is (``ADD``)."""
    try:
        facts = json.loads(_last_user_text(body)).get("new_facts") or []
    except ValueError:
        facts = []
    return Reply.json({"decisions": [{"fact": fact.get("fact", n), "event": "ADD"}
                                     for n, fact in enumerate(facts)]})


class SplitResponder:
    """A fake server's responder with one script and one fallback per :data:`Purpose`.

    ``app`` answers the application's own calls (default: ``Reply.ok("ok")``);
    ``summary``, ``distil`` and ``decide`` answer chatkeep's (default: a valid, small
    reply each). :meth:`script` queues replies for one purpose only; every request's
    purpose is recorded in :attr:`purposes`, its body in :attr:`bodies`."""

    def __init__(self, app: Responder | None = None, *, summary: Responder | None = None,
                 distil: Responder | None = None, decide: Responder | None = None) -> None:
        self._fallback: dict[Purpose, Responder] = {
            "app": app or (lambda body: Reply.ok("ok")),
            "summary": summary or summary_reply,
            "distil": distil or distil_reply,
            "decide": decide or decide_reply,
        }
        self._scripts: dict[Purpose, deque[Reply]] = {p: deque() for p in PURPOSES}
        self._lock = threading.Lock()
        self.purposes: list[Purpose] = []
        """The purpose of every request answered, in order."""
        self.bodies: dict[Purpose, list[dict[str, Any]]] = {p: [] for p in PURPOSES}
        """Every request body answered, by purpose."""

    def script(self, purpose: Purpose, *replies: Reply) -> SplitResponder:
        """Queue ``replies`` for the calls of ``purpose`` only (then its fallback)."""
        if purpose not in self._scripts:
            raise InvalidArgument(f"unknown purpose {purpose!r} (expected one of {PURPOSES})")
        with self._lock:
            self._scripts[purpose].extend(replies)
        return self

    def __call__(self, body: dict[str, Any]) -> Reply:
        """Answer one request: its purpose's next scripted reply, else its fallback."""
        purpose = purpose_of(body)
        with self._lock:
            self.purposes.append(purpose)
            self.bodies[purpose].append(body)
            scripted = self._scripts[purpose].popleft() if self._scripts[purpose] else None
        return scripted if scripted is not None else self._fallback[purpose](body)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks / parts
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, Mapping))
    return ""


def _system_text(body: Mapping[str, Any]) -> str:
    if body.get("system") is not None:  # Anthropic Messages
        return _text(body["system"])
    if isinstance(body.get("instructions"), str):  # Responses
        return str(body["instructions"])
    items = body.get("messages") or body.get("input") or ()
    if isinstance(items, list):
        for item in items:
            if isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
                return _text(item.get("content"))
    return ""


def _last_user_text(body: Mapping[str, Any]) -> str:
    items = body.get("messages") or body.get("input") or ()
    if isinstance(items, list):
        for item in reversed(items):
            if isinstance(item, Mapping) and item.get("role") == "user":
                return _text(item.get("content"))
    return ""

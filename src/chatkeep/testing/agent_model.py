"""A deterministic tool-calling "model" to put behind the fake LLM servers.

Agent tests need a model that behaves like a real one across a tool loop: it asks for
tools, waits for their results, then answers from them, and (for reasoning models) hands
back reasoning that must be returned intact. :class:`AgentModel` does that for the Chat
Completions, Responses and Anthropic Messages APIs with one decision procedure over a
format-independent view of the conversation (a list of :class:`Turn`):

* the latest user text asks for "weather in X" (optionally "and Y", "and Z") and
  ``get_weather`` is declared in ``tools``, with no call made since that user turn:
  one ``get_weather({"city": ...})`` call per city, in parallel;
* every call since that user turn has a result: a text answer quoting each result
  (``"Paris: 18C and sunny; Rome: 24C and clear"``);
* otherwise: ``"echo: <latest user text>"``.

Use it as a responder::

    model = AgentModel()
    FakeOpenAIServer(responder=model.openai)        # /chat/completions and /responses
    FakeAnthropicServer(responder=model.anthropic)  # /v1/messages
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from chatkeep.testing.fake_openai import Reply

#: The three wire formats the fake servers speak.
Api = Literal["chat", "responses", "anthropic"]

_WEATHER_ASK = re.compile(r"weather\s+in\s+([^?.!;\n]+)", re.IGNORECASE)
_CITY_SPLIT = re.compile(r"\s*(?:,\s*(?:and\s+)?|\band\s+)", re.IGNORECASE)
_KNOWN_WEATHER = {
    "paris": "18C and sunny", "rome": "24C and clear", "oslo": "4C and snowing",
    "london": "12C and drizzle", "tokyo": "21C and humid", "berlin": "9C and overcast",
}


@dataclass(frozen=True)
class ToolCallView:
    """One tool call in a :class:`Turn`, whichever API it came from."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One step of a conversation, normalised across the three APIs so the model's
    decision is written once: ``role`` is system/user/assistant/tool."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolCallView, ...] = ()
    tool_results: tuple[tuple[str, str], ...] = ()  # (call id, output text)


@dataclass(frozen=True)
class Decision:
    """The next assistant turn: text and/or tool calls ``(name, arguments)``, plus the
    reasoning a reasoning model would show before it (``None`` when it would not)."""

    text: str | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    reasoning: str | None = None


def fake_weather(city: str) -> str:
    """A deterministic ``get_weather`` result, for tests' tool implementations."""
    known = _KNOWN_WEATHER.get(city.strip().lower())
    if known is not None:
        return known
    return f"{10 + sum(map(ord, city)) % 20}C and cloudy"


def weather_tool(api: Api) -> dict[str, Any]:
    """The ``get_weather`` tool declaration in ``api``'s format (a fresh dict each call)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    description = "Current weather for a city."
    if api == "chat":
        return {"type": "function", "function": {"name": "get_weather",
                                                 "description": description,
                                                 "parameters": schema}}
    if api == "responses":
        return {"type": "function", "name": "get_weather", "description": description,
                "parameters": schema, "strict": True}
    return {"name": "get_weather", "description": description, "input_schema": schema}


def cities_asked(text: str) -> list[str]:
    """Cities in a "weather in X and Y and Z" request (empty if it is not one)."""
    match = _WEATHER_ASK.search(text)
    if match is None:
        return []
    return [c.strip() for c in _CITY_SPLIT.split(match.group(1).strip()) if c.strip()]


def decide(turns: Sequence[Turn], tools: Collection[str]) -> Decision:
    """The model's next move for a normalised conversation, given the declared tool names."""
    last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=None)
    if last_user is None:
        return Decision(text="echo: ", reasoning="There is no user message to answer.")
    user_text = turns[last_user].text
    since = turns[last_user + 1:]
    calls = [c for t in since if t.role == "assistant" for c in t.tool_calls]
    results = {cid: out for t in since if t.role == "tool" for cid, out in t.tool_results}
    if calls:
        missing = [c.id for c in calls if c.id not in results]
        if missing:
            return Decision(text=f"still waiting for tool results: {', '.join(missing)}")
        return Decision(text="; ".join(
            f"{c.arguments.get('city', c.name)}: {results[c.id]}" for c in calls))
    cities = cities_asked(user_text)
    if cities and "get_weather" in tools:
        return Decision(
            calls=tuple(("get_weather", {"city": city}) for city in cities),
            reasoning=f"The user wants the weather in {', '.join(cities)}: "
                      f"{len(cities)} get_weather call(s).")
    return Decision(text=f"echo: {user_text}",
                    reasoning=f"The user said {user_text!r}; nothing to look up, so echo it.")


# --------------------------------------------------------------------------- normalisers


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content
                       if isinstance(part, dict) and part.get("type") in
                       ("text", "input_text", "output_text"))
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def conversation_from_chat(body: Mapping[str, Any]) -> list[Turn]:
    """The normalised view of a Chat Completions request body."""
    turns: list[Turn] = []
    for m in body.get("messages") or []:
        role = m.get("role")
        if role == "tool":
            turns.append(Turn("tool", tool_results=((str(m.get("tool_call_id")),
                                                     _text_of(m.get("content"))),)))
        elif role == "assistant":
            calls = tuple(ToolCallView(c["id"], c["function"]["name"],
                                       _arguments(c["function"].get("arguments")))
                          for c in m.get("tool_calls") or [])
            turns.append(Turn("assistant", _text_of(m.get("content")), calls))
        else:
            turns.append(Turn("system" if role == "developer" else str(role),
                              _text_of(m.get("content"))))
    return turns


def conversation_from_responses(body: Mapping[str, Any]) -> list[Turn]:
    """The normalised view of a Responses request body (``previous_response_id`` already
    expanded into ``input`` by the server)."""
    turns: list[Turn] = []
    if body.get("instructions"):
        turns.append(Turn("system", _text_of(body["instructions"])))
    items = body.get("input")
    if isinstance(items, str):
        return [*turns, Turn("user", items)]
    for item in items or []:
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            turns.append(Turn("system" if role == "developer" else str(role),
                              _text_of(item.get("content"))))
        elif kind == "function_call":
            call = ToolCallView(item["call_id"], item["name"], _arguments(item.get("arguments")))
            if turns and turns[-1].role == "assistant" and not turns[-1].text:
                turns[-1] = Turn("assistant", "", (*turns[-1].tool_calls, call))
            else:
                turns.append(Turn("assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            turns.append(Turn("tool", tool_results=((item["call_id"],
                                                     _text_of(item.get("output"))),)))
    return turns


def conversation_from_anthropic(body: Mapping[str, Any]) -> list[Turn]:
    """The normalised view of an Anthropic Messages request body. A user message carrying
    ``tool_result`` blocks is a tool turn (any text beside them is ignored)."""
    turns: list[Turn] = []
    if body.get("system"):
        turns.append(Turn("system", _text_of(body["system"])))
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
            list(content or [])
        if m.get("role") == "assistant":
            calls = tuple(ToolCallView(b["id"], b["name"], _arguments(b.get("input")))
                          for b in blocks if b.get("type") == "tool_use")
            turns.append(Turn("assistant", _text_of(blocks), calls))
            continue
        results = tuple((str(b.get("tool_use_id")), _text_of(b.get("content")))
                        for b in blocks if b.get("type") == "tool_result")
        turns.append(Turn("tool", tool_results=results) if results
                     else Turn("user", _text_of(blocks)))
    return turns


def declared_tools(body: Mapping[str, Any]) -> set[str]:
    """Names of the function tools a request declares (any of the three formats), minus
    all of them when ``tool_choice`` forbids calls."""
    choice = body.get("tool_choice")
    if choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none"):
        return set()
    names = set()
    for tool in body.get("tools") or []:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


# --------------------------------------------------------------------------- the model


class AgentModel:
    """A deterministic tool-calling model: pass :meth:`openai` or :meth:`anthropic` as a
    fake server's ``responder``. ``reasoning`` controls Responses reasoning items:
    ``None`` follows the request's ``reasoning`` parameter, ``True``/``False`` force it.
    Anthropic thinking blocks appear exactly when the request enables ``thinking``.
    ``run`` goes into every tool call id (``call_<run>0001``): give each process its own
    (a random one) when runs add to one stored conversation, as a real model's ids never
    repeat; the default keeps ids the same from run to run."""

    def __init__(self, *, reasoning: bool | None = None, run: str = "") -> None:
        self.reasoning = reasoning
        self.run = run
        self.decisions: list[Decision] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def openai(self, body: dict[str, Any]) -> Reply:
        """Responder for :class:`FakeOpenAIServer`: Responses bodies (``input``) and Chat
        Completions bodies (``messages``) alike."""
        if "input" in body or "messages" not in body:
            return self.responses(body)
        return self.chat(body)

    def chat(self, body: dict[str, Any]) -> Reply:
        """The next assistant turn for a Chat Completions body."""
        return self._reply(decide(conversation_from_chat(body), declared_tools(body)),
                           "call_", thinking=False)

    def responses(self, body: dict[str, Any]) -> Reply:
        """The next output for a Responses body; with reasoning on, a signed reasoning item
        comes first (the server seals it into ``encrypted_content``)."""
        wanted = body.get("reasoning") is not None if self.reasoning is None else self.reasoning
        return self._reply(decide(conversation_from_responses(body), declared_tools(body)),
                           "call_", thinking=wanted)

    def anthropic(self, body: dict[str, Any]) -> Reply:
        """Responder for :class:`FakeAnthropicServer`: with ``thinking`` enabled a signed
        thinking block precedes the text or ``tool_use`` blocks."""
        thinking = body.get("thinking")
        enabled = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
        return self._reply(decide(conversation_from_anthropic(body), declared_tools(body)),
                           "toolu_", thinking=enabled)

    def _reply(self, decision: Decision, prefix: str, *, thinking: bool) -> Reply:
        with self._lock:
            self.decisions.append(decision)
            calls = tuple((f"{prefix}{self.run}{next(self._ids):04d}", name,
                           json.dumps(args))
                          for name, args in decision.calls)
        return Reply(text=decision.text, tool_calls=calls,
                     thinking=decision.reasoning if thinking else None)

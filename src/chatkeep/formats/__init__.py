"""Wire formats: one module per provider API, each converting to and from the internal model.

``openai_chat`` (the default), ``openai_responses`` and ``anthropic_messages`` have the
same names: ``NAME``, ``to_wire``, ``from_wire``, ``read_response``, ``recognises``. A
conversation recorded in one format replays in any other.
"""

from __future__ import annotations

from typing import Any, Literal

from chatkeep.errors import InvalidArgument, InvalidMessage
from chatkeep.formats import anthropic_messages, openai_chat, openai_responses
from chatkeep.formats.anthropic_messages import AnthropicHistory
from chatkeep.formats.base import History, HistoryInfo, Outgoing, WireFormat
from chatkeep.messages import AssistantTurn, as_dict

FormatName = Literal["openai_chat", "openai_responses", "anthropic_messages"]
FORMATS: dict[str, WireFormat] = {
    openai_chat.NAME: openai_chat,
    openai_responses.NAME: openai_responses,
    anthropic_messages.NAME: anthropic_messages,
}

__all__ = [
    "FORMATS",
    "AnthropicHistory",
    "FormatName",
    "History",
    "HistoryInfo",
    "Outgoing",
    "WireFormat",
    "get_format",
    "read_response",
]


def get_format(name: str) -> WireFormat:
    """The format module called ``name``; an unknown name is ``InvalidArgument``."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown wire format {name!r} "
                              f"(expected one of {sorted(FORMATS)})") from None


def read_response(response: Any) -> AssistantTurn:
    """Read a model response of any supported format, recognised by its shape."""
    if callable(getattr(response, "get_final_completion", None)) or \
            openai_chat.is_chunk_stream(response):
        return openai_chat.read_response(response)
    data = as_dict(response)
    for wire in FORMATS.values():
        if wire.recognises(data):
            return wire.read_response(data)
    raise InvalidMessage("not a response chatkeep can read: expected an OpenAI chat "
                         "completion, a Responses API response or an Anthropic message")

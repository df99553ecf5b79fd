"""The one method chatkeep needs from a language model, so any provider can plug in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chatkeep.messages import Usage


@dataclass(frozen=True, slots=True)
class Completion:
    """A model's text answer and what it cost."""

    text: str
    usage: Usage | None
    model: str | None


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns chat messages into a completion (raise ``ModelError`` on failure)."""

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        """Answer ``messages`` with ``model``; ``json_mode`` asks for a JSON object reply."""
        ...


def as_chat_model(client: Any) -> ChatModel:
    """Accept a ``ChatModel`` or an ``openai.OpenAI``-style client and return a ``ChatModel``."""
    if isinstance(client, ChatModel):
        return client
    if hasattr(client, "chat") and hasattr(client.chat, "completions"):
        from chatkeep.llm.openai_client import OpenAIChatModel

        return OpenAIChatModel(client)
    raise TypeError(
        f"expected a chatkeep ChatModel or an OpenAI client, got {type(client).__name__}")

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


@runtime_checkable
class AsyncChatModel(Protocol):
    """Async twin of ``ChatModel``: ``complete`` is awaited."""

    async def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                       max_tokens: int | None = None, temperature: float | None = None,
                       json_mode: bool = False) -> Completion:
        """Answer ``messages`` with ``model``; ``json_mode`` asks for a JSON object reply."""
        ...

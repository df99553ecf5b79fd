"""Turning what callers pass into the models chatkeep holds: ``as_chat_model`` (sync),
``as_async_chat_model`` (async), and the guard every one of them is wrapped in.

Kept apart from :mod:`chatkeep.llm.base` (the protocols) so the OpenAI client can import
the protocols while these adapters import the client: each module only looks down.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from chatkeep.errors import ConfigError
from chatkeep.llm.base import AsyncChatModel, ChatModel, Completion
from chatkeep.llm.openai_client import AsyncOpenAIChatModel, OpenAIChatModel
from chatkeep.observability import tracing as telemetry
from chatkeep.privacy.egress import outgoing

__all__ = ["GuardedChatModel", "as_async_chat_model", "as_chat_model", "is_async_client"]


class GuardedChatModel:
    """The only way chatkeep's core reaches a language model: every model it is given is
    wrapped in this (:func:`as_chat_model`), and each request body passes
    :func:`chatkeep.privacy.egress.outgoing` on its way to the client, scrubbed by the
    session's egress bound around the call and refused when none is. A code path that
    forgets the egress fails closed in every test, privacy on or off."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        """``inner.complete`` on the scrubbed messages (``PrivacyError`` with no egress),
        in a ``chat`` span when OpenTelemetry is installed."""
        body = outgoing(list(messages))
        send: Callable[[], Completion] = lambda: self.inner.complete(  # noqa: E731
            body, model=model, max_tokens=max_tokens, temperature=temperature,
            json_mode=json_mode)
        if telemetry.ON:
            return telemetry.chat(self.inner, body, send, model=model, max_tokens=max_tokens,
                                  temperature=temperature, json_mode=json_mode)
        return send()


def as_async_chat_model(client: Any) -> AsyncChatModel:
    """Async twin of ``as_chat_model``: an ``AsyncChatModel`` or an ``openai.AsyncOpenAI``
    client. A sync client is a ``ConfigError`` here, at construction: its calls would block
    the event loop."""
    if not is_async_client(client):
        raise ConfigError(
            f"{type(client).__name__} is a sync client, and this is the async API: pass "
            "openai.AsyncOpenAI (or an AsyncChatModel) here, or use chatkeep.Chatkeep")
    if isinstance(client, AsyncChatModel) and not hasattr(client, "chat"):
        return client
    if hasattr(client, "chat") and hasattr(client.chat, "completions"):
        return AsyncOpenAIChatModel(client)
    raise ConfigError(
        f"expected a chatkeep AsyncChatModel or an openai.AsyncOpenAI client, "
        f"got {type(client).__name__}")


def as_chat_model(client: Any) -> ChatModel:
    """Accept a ``ChatModel`` or an ``openai.OpenAI``-style client and return a ``ChatModel``
    that only sends through the bound egress (:class:`GuardedChatModel`).

    An async client (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``) is refused here,
    at construction, with a ``ConfigError``: its calls return coroutines the sync API
    cannot await, which would otherwise fail on every compression.
    """
    if isinstance(client, GuardedChatModel):
        return client
    if is_async_client(client):
        raise ConfigError(
            f"{type(client).__name__} is an async client, and this is the sync API: pass "
            "the sync client (openai.OpenAI) here")
    if isinstance(client, ChatModel):
        return GuardedChatModel(client)
    if hasattr(client, "chat") and hasattr(client.chat, "completions"):
        return GuardedChatModel(OpenAIChatModel(client))
    raise ConfigError(
        f"expected a chatkeep ChatModel or an OpenAI client, got {type(client).__name__}")


def is_async_client(client: Any) -> bool:
    """Whether ``client`` is an async SDK client or an async ``ChatModel`` (its calls return
    coroutines)."""
    if type(client).__name__.startswith("Async"):
        return True
    for path in (("complete",), ("chat", "completions", "create"), ("messages", "create")):
        target: Any = client
        for attr in path:
            target = getattr(target, attr, None)
        if target is not None:
            return inspect.iscoroutinefunction(target)
    return False

"""``OpenAIChatModel``: the official ``openai`` SDK against any OpenAI-compatible endpoint.

Works with OpenAI, Azure OpenAI, Ollama, vLLM and a LiteLLM proxy by base URL.
Every SDK failure (HTTP status, timeout, connection) and every unusable reply
(no choices, empty text) becomes a ``ModelError`` so callers handle one type. Each call
has a total deadline, retries included (:mod:`chatkeep.llm.deadline`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from chatkeep.config import LLMConfig
from chatkeep.errors import ModelError
from chatkeep.llm.base import Completion
from chatkeep.llm.deadline import (
    apost_within,
    post_within,
    retries_of,
    sdk_error,
    supports_deadline,
    total_timeout,
)
from chatkeep.messages import Usage


class OpenAIChatModel:
    """A ``ChatModel`` backed by ``openai.OpenAI`` (pass one, or the settings to build one)."""

    def __init__(self, client: Any | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2) -> None:
        if client is None:
            import openai  # here: importing the SDK costs start-up

            client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                   timeout=timeout, max_retries=max_retries)
        self.client = client
        self.timeout = total_timeout(client, timeout)
        """The whole call's deadline in seconds, retries included."""
        self.max_retries = retries_of(client, max_retries)

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        """One chat completion within ``timeout`` seconds in all; any SDK failure, late or
        unusable reply is a ``ModelError``."""
        kwargs = request(messages, model, max_tokens, temperature, json_mode)
        if supports_deadline(self.client):
            return _completion(post_within(self.client, _chat, kwargs, self.timeout,
                                           self.max_retries, model), model)
        try:
            response = self.client.chat.completions.create(**kwargs)
        except (sdk_error(), ValueError) as exc:  # ValueError: a body that is not JSON
            raise ModelError(f"{model}: {type(exc).__name__}: {exc}") from exc
        return _completion(response, model)


class AsyncOpenAIChatModel:
    """Async twin of ``OpenAIChatModel``: ``openai.AsyncOpenAI`` (same request, same errors)."""

    def __init__(self, client: Any | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2) -> None:
        if client is None:
            import openai  # here: importing the SDK costs start-up

            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                        timeout=timeout, max_retries=max_retries)
        self.client = client
        self.timeout = total_timeout(client, timeout)
        """The whole call's deadline in seconds, retries included."""
        self.max_retries = retries_of(client, max_retries)

    async def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                       max_tokens: int | None = None, temperature: float | None = None,
                       json_mode: bool = False) -> Completion:
        """One chat completion, awaited within the same deadline; failures are
        ``ModelError`` as in the sync twin."""
        kwargs = request(messages, model, max_tokens, temperature, json_mode)
        if supports_deadline(self.client):
            return _completion(await apost_within(self.client, _chat, kwargs, self.timeout,
                                                  self.max_retries, model), model)
        try:
            response = await self.client.chat.completions.create(**kwargs)
        except (sdk_error(), ValueError) as exc:  # ValueError: a body that is not JSON
            raise ModelError(f"{model}: {type(exc).__name__}: {exc}") from exc
        return _completion(response, model)


def _chat(client: Any) -> Any:
    return client.chat.completions


def request(messages: Sequence[dict[str, Any]], model: str, max_tokens: int | None,
            temperature: float | None, json_mode: bool) -> dict[str, Any]:
    """The Chat Completions request both twins send."""
    kwargs: dict[str, Any] = {"model": model, "messages": list(messages)}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if temperature is not None:
        kwargs["temperature"] = temperature
    if json_mode:
        kwargs["response_format"] = {"type": "json_object"}
    return kwargs


def _completion(response: Any, model: str) -> Completion:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError(f"{model}: the reply has no choices")
    text = getattr(choices[0].message, "content", None)
    if not isinstance(text, str) or not text.strip():
        raise ModelError(f"{model}: the reply has no text")
    usage = None
    raw_usage = getattr(response, "usage", None)
    if raw_usage is not None:
        usage = Usage(int(getattr(raw_usage, "prompt_tokens", 0) or 0),
                      int(getattr(raw_usage, "completion_tokens", 0) or 0))
    return Completion(text, usage, getattr(response, "model", None) or model)


def model_from_config(config: LLMConfig,
                      environ: Mapping[str, str] | None = None) -> OpenAIChatModel | None:
    """A client when an endpoint is configured (config or ``OPENAI_*`` env), else ``None``
    (chatkeep then runs offline with the extractive summarizer)."""
    settings = _endpoint(config, environ)
    return None if settings is None else OpenAIChatModel(**settings)


def async_model_from_config(config: LLMConfig, environ: Mapping[str, str] | None = None
                            ) -> AsyncOpenAIChatModel | None:
    """Async twin of ``model_from_config``."""
    settings = _endpoint(config, environ)
    return None if settings is None else AsyncOpenAIChatModel(**settings)


def _endpoint(config: LLMConfig, environ: Mapping[str, str] | None) -> dict[str, Any] | None:
    env = os.environ if environ is None else environ
    base_url = config.base_url or env.get("OPENAI_BASE_URL")
    api_key = config.api_key or env.get("OPENAI_API_KEY")
    if not base_url and not api_key:
        return None
    return {"base_url": base_url, "api_key": api_key, "timeout": config.timeout,
            "max_retries": config.max_retries}

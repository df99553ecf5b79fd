"""``OpenAIEmbedder`` and its async twin: the OpenAI ``/v1/embeddings`` wire.

Spoken through the official SDK, which OpenAI, Azure, Ollama, vLLM, LiteLLM and
text-embeddings-inference all serve. Every SDK failure or malformed reply is a
``ModelError``, and each request has a total deadline, retries included
(:mod:`chatkeep.llm.deadline`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chatkeep.errors import ConfigError, ModelError
from chatkeep.llm.deadline import (
    apost_within,
    post_within,
    retries_of,
    sdk_error,
    supports_deadline,
    total_timeout,
)

DEFAULT_BATCH_SIZE = 64
"""Texts per ``/v1/embeddings`` request (the hosted API accepts up to 2048)."""


class OpenAIEmbedder:
    """An ``Embedder`` backed by ``openai.OpenAI().embeddings`` (pass a client, or the
    settings to build one). Long inputs are sent in batches of ``batch_size``."""

    def __init__(self, model: str, client: Any | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if not model:
            raise ConfigError("an embedding model name is required")
        if batch_size <= 0:
            raise ConfigError("batch_size must be positive")
        if client is None:
            import openai  # here: importing the SDK costs start-up

            client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                   timeout=timeout, max_retries=max_retries)
        self.client: Any = client
        self._model = model
        self.batch_size = batch_size
        self.timeout = total_timeout(client, timeout)
        """Each request's deadline in seconds, retries included."""
        self.max_retries = retries_of(client, max_retries)

    @property
    def model(self) -> str:
        """The embedding model requested from the endpoint."""
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts`` (``ModelError`` for any SDK failure or malformed reply)."""
        return self.embed_counted(texts)[0]

    def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], int | None]:
        """``embed``'s vectors and the input tokens the endpoint counted over all batches
        (``usage.prompt_tokens``; ``None`` when a reply had none)."""
        vectors: list[list[float]] = []
        counted: int | None = 0
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            response = self._batch(batch)
            vectors += vectors_of(response, batch, self._model)
            counted = add_usage(counted, response)
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise ModelError(f"{self._model}: vectors of different lengths in one reply")
        return vectors, counted

    def _batch(self, texts: list[str]) -> Any:
        if supports_deadline(self.client):
            return post_within(self.client, _embeddings, self._request(texts),
                               self.timeout, self.max_retries, self._model)
        try:
            return self.client.embeddings.create(model=self._model, input=texts,
                                                 encoding_format="float")
        except sdk_error() as exc:
            raise ModelError(f"{self._model}: {type(exc).__name__}: {exc}") from exc

    def _request(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self._model, "input": texts, "encoding_format": "float"}


def _embeddings(client: Any) -> Any:
    return client.embeddings


class AsyncOpenAIEmbedder(OpenAIEmbedder):
    """Async twin of ``OpenAIEmbedder`` over ``openai.AsyncOpenAI`` (same request, same
    checks, same errors)."""

    def __init__(self, model: str, client: Any | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if client is None:
            import openai  # here: importing the SDK costs start-up

            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                        timeout=timeout, max_retries=max_retries)
        super().__init__(model, client, timeout=timeout, max_retries=max_retries,
                         batch_size=batch_size)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        """Vectors for ``texts``, awaited."""
        return (await self.embed_counted(texts))[0]

    async def embed_counted(  # type: ignore[override]
            self, texts: Sequence[str]) -> tuple[list[list[float]], int | None]:
        """``embed``'s vectors and the input tokens the endpoint counted, awaited."""
        vectors: list[list[float]] = []
        counted: int | None = 0
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            if supports_deadline(self.client):
                response = await apost_within(self.client, _embeddings, self._request(batch),
                                              self.timeout, self.max_retries, self.model)
            else:
                try:
                    response = await self.client.embeddings.create(
                        model=self.model, input=batch, encoding_format="float")
                except sdk_error() as exc:
                    raise ModelError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
            vectors += vectors_of(response, batch, self.model)
            counted = add_usage(counted, response)
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise ModelError(f"{self.model}: vectors of different lengths in one reply")
        return vectors, counted


def add_usage(counted: int | None, response: Any) -> int | None:
    """``counted`` plus the input tokens an ``/v1/embeddings`` reply reports
    (``usage.prompt_tokens``, else ``usage.total_tokens``); ``None`` once a reply
    reported none (the reservation is then settled at its estimate)."""
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "prompt_tokens", None)
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        tokens = getattr(usage, "total_tokens", None)
    if counted is None or not isinstance(tokens, int) or isinstance(tokens, bool) \
            or tokens < 0:
        return None
    return counted + tokens


def vectors_of(response: Any, texts: Sequence[str], model: str) -> list[list[float]]:
    """The vectors of an ``/v1/embeddings`` reply, in input order, checked."""
    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != len(texts):
        raise ModelError(f"{model}: asked for {len(texts)} embeddings, got "
                         f"{len(data) if isinstance(data, list) else 'none'}")
    ordered = sorted(data, key=lambda item: int(getattr(item, "index", 0)))
    vectors = []
    for item in ordered:
        vector = getattr(item, "embedding", None)
        if not isinstance(vector, list) or not vector:
            raise ModelError(f"{model}: an embedding is not a list of numbers")
        vectors.append([float(x) for x in vector])
    return vectors

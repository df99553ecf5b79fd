"""Embedders: text -> vectors for recall by meaning.

``Embedder`` is the one method chatkeep needs (plus the model name it stores beside
every vector, so a model change is visible row by row). ``OpenAIEmbedder`` speaks
the OpenAI ``/v1/embeddings`` wire through the official SDK, which OpenAI, Azure,
Ollama, vLLM, LiteLLM and text-embeddings-inference all serve; it is configured like
the chat model (``memory.embedding_model``, with the base URL and key of ``llm`` or
its own). ``HashEmbedder`` is a deterministic bag-of-words stand-in for tests and
offline demos: no model, no network, same text -> same vector.

Every failure (HTTP status, timeout, a reply of the wrong shape or length) is a
``ModelError``, so callers handle one type.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import openai

from chatkeep.config import LLMConfig, MemoryConfig
from chatkeep.errors import ConfigError, ModelError
from chatkeep.memory.text import normalise
from chatkeep.privacy.detector import resolve_overlaps
from chatkeep.privacy.vault import unseal

if TYPE_CHECKING:
    from chatkeep.privacy.guard import PrivacyGuard
    from chatkeep.sessions import ChatSession

DEFAULT_BATCH_SIZE = 64
"""Texts per ``/v1/embeddings`` request (the hosted API accepts up to 2048)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one model (raise ``ModelError`` on failure)."""

    @property
    def model(self) -> str:
        """The model name stored beside each vector (a different name = re-embed)."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, all of the same length."""
        ...


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
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                   timeout=timeout, max_retries=max_retries)
        self.client: Any = client
        self._model = model
        self.batch_size = batch_size

    @property
    def model(self) -> str:
        """The embedding model requested from the endpoint."""
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts`` (``ModelError`` for any SDK failure or malformed reply)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self._batch(list(texts[start:start + self.batch_size]))
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise ModelError(f"{self._model}: vectors of different lengths in one reply")
        return vectors

    def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self.client.embeddings.create(model=self._model, input=texts,
                                                     encoding_format="float")
        except openai.OpenAIError as exc:
            raise ModelError(f"{self._model}: {type(exc).__name__}: {exc}") from exc
        return vectors_of(response, texts, self._model)


class AsyncEmbedder(Protocol):
    """Async twin of ``Embedder``: ``embed`` is awaited."""

    @property
    def model(self) -> str:
        """The model name stored beside each vector."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, all of the same length."""
        ...


class AsyncOpenAIEmbedder(OpenAIEmbedder):
    """Async twin of ``OpenAIEmbedder`` over ``openai.AsyncOpenAI`` (same request, same
    checks, same errors)."""

    def __init__(self, model: str, client: Any | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if client is None:
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                        timeout=timeout, max_retries=max_retries)
        super().__init__(model, client, batch_size=batch_size)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        """Vectors for ``texts``, awaited."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            try:
                response = await self.client.embeddings.create(
                    model=self.model, input=batch, encoding_format="float")
            except openai.OpenAIError as exc:
                raise ModelError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
            vectors += vectors_of(response, batch, self.model)
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise ModelError(f"{self.model}: vectors of different lengths in one reply")
        return vectors


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


class HashEmbedder:
    """A deterministic embedder for tests and demos: hashed word (and word-pair) counts,
    L2-normalised. Texts sharing words are near; ``synonyms`` maps a word to a concept
    token so chosen paraphrases land near each other too."""

    def __init__(self, dimension: int = 64, *, model: str = "hash-embedder",
                 synonyms: Mapping[str, str] | None = None) -> None:
        if dimension <= 0:
            raise ConfigError("dimension must be positive")
        self.dimension = dimension
        self._model = model
        self.synonyms = {k.casefold(): v.casefold() for k, v in (synonyms or {}).items()}
        self.calls: list[list[str]] = []

    @property
    def model(self) -> str:
        """The name stored beside the vectors."""
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text."""
        self.calls.append(list(texts))
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        """The vector of one text (the same on every call and machine)."""
        values = [0.0] * self.dimension
        words = [self.synonyms.get(w, w) for w in normalise(text).split()]
        for word in words:
            digest = hashlib.sha256(word.encode("utf-8")).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            values[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in values))
        if norm == 0.0:
            values[0] = 1.0
            return values
        return [v / norm for v in values]


def embedder_from_config(memory: MemoryConfig, llm: LLMConfig,
                         environ: Mapping[str, str] | None = None,
                         cls: type[OpenAIEmbedder] = OpenAIEmbedder) -> OpenAIEmbedder | None:
    """The embedder ``memory.embedding_model`` asks for (``None`` when it is not set: recall
    is then full-text only). Base URL and key: ``memory.embedding_base_url`` /
    ``memory.embedding_api_key`` when set, else the chat model's (``llm.*``, then the
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` environment). ``cls``:
    ``AsyncOpenAIEmbedder`` for the async API."""
    if not memory.embedding_model:
        return None
    env = os.environ if environ is None else environ
    base_url = memory.embedding_base_url or llm.base_url or env.get("OPENAI_BASE_URL")
    api_key = memory.embedding_api_key or llm.api_key or env.get("OPENAI_API_KEY")
    if not base_url and not api_key:
        raise ConfigError(
            f"memory.embedding_model is {memory.embedding_model!r} but no endpoint is "
            "configured: set memory.embedding_base_url (or llm.base_url / OPENAI_BASE_URL) "
            "or an API key")
    return cls(memory.embedding_model, base_url=base_url, api_key=api_key,
               timeout=llm.timeout, max_retries=llm.max_retries,
               batch_size=memory.embedding_batch_size)


class EmbedMask(Protocol):
    """What leaves for the embedding model: ``text`` with personal values masked.

    ``sealed``: the values a memory carries (``Memory.sealed_pii``), found literally;
    ``session``: the conversation the text belongs to (its vault's values are masked too);
    ``context``: the message ``text`` answers ("What's your SSN?" makes a bare number one).
    """

    def __call__(self, text: str, sealed: str | None = None, *,
                 session: ChatSession | None = None, context: str | None = None) -> str:
        """The form of ``text`` an embedding endpoint may see."""
        ...


def pii_mask(guard: PrivacyGuard) -> EmbedMask:
    """What the embedding model may see when ``privacy.anonymize_pii`` is on, or the text
    belongs to a session or memory made under it (a worker's own switch never lowers the
    protection a session was created with): each personal
    value replaced by its type (``<EMAIL>``), the same in every session so vectors stay
    comparable. Values are what the recognizers detect (with the question ``text`` answers
    as context), those a memory carries sealed (``sealed_pii``) and those the session's
    vault holds, both found literally. The one mask every embedding request goes through:
    recall queries, memories at distil time, their retries and the ``memories embed``
    backfill."""
    def mask(text: str, sealed: str | None = None, *, session: ChatSession | None = None,
             context: str | None = None) -> str:
        if not (guard.config.anonymize_pii or sealed
                or (session is not None and guard.redacts(session))):
            return text  # nothing asks for protection: the user's choice
        spans = list(guard.redactor.detector.detect(text, context))
        if sealed:
            spans += unseal(sealed, guard.config.encryption_key).find_known(text)
        if session is not None:
            spans += guard.vault(session).find_known(text)
        out, position = [], 0
        for span in resolve_overlaps(spans):
            out += [text[position:span.start], f"<{span.entity_type}>"]
            position = span.end
        return "".join([*out, text[position:]])
    return mask

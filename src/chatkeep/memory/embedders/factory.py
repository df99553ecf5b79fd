"""``embedder_from_config``: the embedder ``memory.embedder`` / ``memory.embedding_model``
ask for; ``make_embedder``: the one ``Chatkeep(embedder=...)`` was given.

An endpoint is configured like the chat model: the base URL and key of ``llm``, or its
own. ``memory.embedder = "local"`` needs no endpoint (:mod:`.local`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from chatkeep.config import LLMConfig, MemoryConfig
from chatkeep.errors import ConfigError
from chatkeep.memory.embedders.base import Embedder
from chatkeep.memory.embedders.local import MODEL_NAME as LOCAL_MODEL
from chatkeep.memory.embedders.local import AsyncLocalEmbedder, LocalEmbedder
from chatkeep.memory.embedders.openai_embeddings import AsyncOpenAIEmbedder, OpenAIEmbedder

LOCAL = "local"
"""``Chatkeep(embedder="local")`` / ``memory.embedder = "local"``: ``LocalEmbedder``."""


def embedder_from_config(memory: MemoryConfig, llm: LLMConfig,
                         environ: Mapping[str, str] | None = None,
                         cls: type[OpenAIEmbedder] = OpenAIEmbedder,
                         ) -> OpenAIEmbedder | LocalEmbedder | None:
    """The embedder the config asks for. ``memory.embedder = "local"``: a
    ``LocalEmbedder`` (``memory.embedding_model`` unset or that model's name). Otherwise
    the endpoint of ``memory.embedding_model`` (``None`` when it is not set: recall is
    then full-text only); base URL and key: ``memory.embedding_base_url`` /
    ``memory.embedding_api_key`` when set, else the chat model's (``llm.*``, then the
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` environment). ``cls``:
    ``AsyncOpenAIEmbedder`` for the async API (which then gets ``AsyncLocalEmbedder``
    for ``local``)."""
    if memory.embedder == LOCAL:
        if memory.embedding_model not in (None, LOCAL_MODEL):
            raise ConfigError(
                f"memory.embedder is 'local' (always {LOCAL_MODEL}) but "
                f"memory.embedding_model is {memory.embedding_model!r}: unset it, or set "
                "memory.embedder = 'endpoint' to use that model")
        local = AsyncLocalEmbedder if issubclass(cls, AsyncOpenAIEmbedder) else LocalEmbedder
        return local(batch_size=memory.embedding_batch_size)
    if not memory.embedding_model:
        return None
    env = os.environ if environ is None else environ
    base_url = memory.embedding_base_url or llm.base_url or env.get("OPENAI_BASE_URL")
    api_key = memory.embedding_api_key or llm.api_key or env.get("OPENAI_API_KEY")
    if not base_url and not api_key:
        raise ConfigError(
            f"memory.embedding_model is {memory.embedding_model!r} but no endpoint is "
            "configured: set memory.embedding_base_url (or llm.base_url / OPENAI_BASE_URL) "
            "or an API key, or memory.embedder = 'local' for a model on this machine")
    return cls(memory.embedding_model, base_url=base_url, api_key=api_key,
               timeout=llm.timeout, max_retries=llm.max_retries,
               batch_size=memory.embedding_batch_size)


def make_embedder(embedder: Embedder | str | None, memory: MemoryConfig,
                  llm: LLMConfig) -> Embedder | None:
    """The embedder ``Chatkeep(embedder=...)`` means: an ``Embedder`` as given, ``"local"``
    a ``LocalEmbedder``, ``None`` the configured one (``embedder_from_config``)."""
    if embedder is None:
        return embedder_from_config(memory, llm)
    if isinstance(embedder, str):
        if embedder.strip().lower() != LOCAL:
            raise ConfigError(f"embedder={embedder!r}: the only name accepted is 'local' "
                              "(or pass an Embedder)")
        return LocalEmbedder(batch_size=memory.embedding_batch_size)
    return embedder

"""Embedders: text -> vectors for recall by meaning, one module per implementation.

The protocols are in :mod:`.base`; ``OpenAIEmbedder`` and its async twin speak the OpenAI
``/v1/embeddings`` wire (:mod:`.openai_embeddings`); ``LocalEmbedder`` runs
all-MiniLM-L6-v2 on this machine, offline (:mod:`.local`, ``chatkeep[local]``);
``HashEmbedder`` is the offline stand-in for tests and demos (:mod:`.hashing`);
:mod:`.factory` builds the configured one, and :mod:`.mask` masks personal values before
any text reaches a model.
"""

from __future__ import annotations

from chatkeep.memory.embedders.base import AsyncEmbedder, Embedder
from chatkeep.memory.embedders.factory import embedder_from_config, make_embedder
from chatkeep.memory.embedders.hashing import HashEmbedder
from chatkeep.memory.embedders.local import AsyncLocalEmbedder, LocalEmbedder
from chatkeep.memory.embedders.mask import EmbedMask, pii_mask
from chatkeep.memory.embedders.openai_embeddings import (
    DEFAULT_BATCH_SIZE,
    AsyncOpenAIEmbedder,
    OpenAIEmbedder,
    vectors_of,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "AsyncEmbedder",
    "AsyncLocalEmbedder",
    "AsyncOpenAIEmbedder",
    "EmbedMask",
    "Embedder",
    "HashEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "embedder_from_config",
    "make_embedder",
    "pii_mask",
    "vectors_of",
]

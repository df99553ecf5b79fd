"""``HashEmbedder``: a deterministic bag-of-words stand-in for tests and offline demos.

No model, no network: same text -> same vector, on every call and machine.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

from chatkeep.errors import ConfigError
from chatkeep.memory.text import normalise


class HashEmbedder:
    """A deterministic embedder for tests and demos: hashed word (and word-pair) counts,
    L2-normalised. Texts sharing words are near; ``synonyms`` maps a word to a concept
    token so chosen paraphrases land near each other too."""

    offline = True
    """It calls no model: its calls reserve nothing on a quota."""

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

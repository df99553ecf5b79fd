"""The embedder protocols: text -> vectors of one model, sync and async.

``Embedder`` is the one method chatkeep needs (plus the model name it stores beside
every vector, so a model change is visible row by row). Every failure (HTTP status,
timeout, a reply of the wrong shape or length) is a ``ModelError``, so callers handle
one type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


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


class AsyncEmbedder(Protocol):
    """Async twin of ``Embedder``: ``embed`` is awaited."""

    @property
    def model(self) -> str:
        """The model name stored beside each vector."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, all of the same length."""
        ...

"""The embedder protocols: text -> vectors of one model, sync and async.

``Embedder`` is the one method chatkeep needs (plus the model name it stores beside
every vector, so a model change is visible row by row). Every failure (HTTP status,
timeout, a reply of the wrong shape or length) is a ``ModelError``, so callers handle
one type.

An embedder may also say what its endpoint counted (``CountingEmbedder``: a quota
reservation is settled at it) and that it runs on this machine (``offline = True``:
its calls cost no tokens, so they reserve nothing; see :func:`is_offline`).
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


@runtime_checkable
class CountingEmbedder(Embedder, Protocol):
    """An ``Embedder`` that also reports the input tokens its endpoint counted (the
    ``usage.prompt_tokens`` of an ``/v1/embeddings`` reply): the quota reservation of
    the call is settled at it (an embedder without it is settled at its estimate)."""

    def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], int | None]:
        """``embed``'s vectors and the input tokens the endpoint counted (``None``: it
        reported none)."""
        ...


def is_offline(embedder: object) -> bool:
    """Whether ``embedder`` runs on this machine (``offline = True``: ``LocalEmbedder``,
    ``HashEmbedder``): no tokens are billed for its calls, so they reserve nothing on a
    quota (as the offline extractive summarizer's folds)."""
    return getattr(embedder, "offline", False) is True

"""The bridge between the event loop and chatkeep's one implementation of every rule.

chatkeep's core is written once, as plain synchronous code. The async API runs it
inside a greenlet on the event loop (SQLAlchemy's asyncio bridge, ``greenlet_spawn``):
whenever the core waits for the database (an async driver: aiosqlite, asyncpg, psycopg's
async connection) or for a model (``openai.AsyncOpenAI`` through :class:`BridgedChatModel`),
the greenlet switches back to the loop, which awaits it; no thread is used and no rule,
query or prompt exists twice. The price: a plug-in that blocks (a sync HTTP call in a
custom summariser) blocks the loop, so the async API accepts only async model clients.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

from chatkeep.llm.base import AsyncChatModel, Completion
from chatkeep.memory.embeddings import AsyncEmbedder

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["BridgedChatModel", "BridgedEmbedder", "bridge"]


async def bridge(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the core callable ``fn`` on the event loop: its waits are awaited, not blocked."""
    result: T = await greenlet_spawn(functools.partial(fn, *args, **kwargs))
    return result


class BridgedChatModel:
    """The core's ``ChatModel`` over an ``AsyncChatModel``: each call is awaited on the
    loop from inside the bridge (only usable there)."""

    def __init__(self, model: AsyncChatModel) -> None:
        self.model = model

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        """Await the async model's completion from inside the bridge."""
        result: Completion = await_only(self.model.complete(
            messages, model=model, max_tokens=max_tokens, temperature=temperature,
            json_mode=json_mode))
        return result


class BridgedEmbedder:
    """The core's ``Embedder`` over an ``AsyncEmbedder`` (only usable inside the bridge)."""

    def __init__(self, embedder: AsyncEmbedder) -> None:
        self.embedder = embedder

    @property
    def model(self) -> str:
        """The embedding model's name."""
        return self.embedder.model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Await the async embedder from inside the bridge."""
        vectors: list[list[float]] = await_only(self.embedder.embed(texts))
        return vectors

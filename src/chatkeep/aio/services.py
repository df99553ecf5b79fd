"""Async twins of the compressor, the memory service and the privacy guard.

Each method is the sync core's method run through the bridge (see
:mod:`chatkeep.aio.twins`): one implementation of the rules (what folds, what replays,
what is redacted, what the distiller writes). Sessions may be passed in either form.
"""

# mypy: disable-error-code="empty-body"
# (The bodies of @bridged methods are supplied by the decorator.)

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload

from chatkeep.aio.sessions import AsyncChatSession
from chatkeep.aio.twins import Twin, bridged, mirror
from chatkeep.formats import AnthropicHistory, History
from chatkeep.formats.openai_chat import ChatHistory
from chatkeep.formats.openai_responses import ResponsesHistory
from chatkeep.history.compressor import HistoryCompressor
from chatkeep.memory.distiller import DistilResult
from chatkeep.memory.recall import Memory
from chatkeep.memory.scopes import Scope
from chatkeep.memory.service import EmbedResult, MemoryService
from chatkeep.privacy.guard import PrivacyGuard
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.privacy.vault import PlaceholderVault
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.memory_rows import VectorStatus

__all__ = ["AsyncHistoryCompressor", "AsyncMemoryService", "AsyncPrivacyGuard"]

AnySession = ChatSession | AsyncChatSession
T = TypeVar("T")


class AsyncHistoryCompressor(Twin[HistoryCompressor]):
    """Async twin of ``HistoryCompressor`` (``keep.compressor``)."""

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["openai_chat"] = "openai_chat",
                            max_output_tokens: int | None = None) -> ChatHistory: ...

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["openai_responses"],
                            max_output_tokens: int | None = None) -> ResponsesHistory: ...

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["anthropic_messages"],
                            max_output_tokens: int | None = None) -> AnthropicHistory: ...

    @bridged
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: str = "openai_chat",
                            max_output_tokens: int | None = None) -> History[Any]:
        """The messages to send next (see ``HistoryCompressor.build_history``, which
        also says how ``max_output_tokens`` reserves the call on the tenant's quota); the
        summarizer and the distiller it dispatches are awaited, never block the loop."""

    @overload
    async def preview_history(self, session: AnySession, system_prompt: str, *,
                              memories: Sequence[str] | None = None,
                              format: Literal["openai_chat"] = "openai_chat") -> ChatHistory: ...

    @overload
    async def preview_history(self, session: AnySession, system_prompt: str, *,
                              memories: Sequence[str] | None = None,
                              format: Literal["openai_responses"]) -> ResponsesHistory: ...

    @overload
    async def preview_history(self, session: AnySession, system_prompt: str, *,
                              memories: Sequence[str] | None = None,
                              format: Literal["anthropic_messages"]) -> AnthropicHistory: ...

    @bridged
    async def preview_history(self, session: AnySession, system_prompt: str, *,
                              memories: Sequence[str] | None = None,
                              format: str = "openai_chat") -> History[Any]:
        """What the model would receive from the stored state, for people to look at (see
        ``HistoryCompressor.preview_history``): never folds, calls a model or writes."""

    @bridged
    async def fold_backlog(self, session: AnySession) -> int:
        """Fold a session's backlog with no per-turn bound on summarizer calls (the
        ``"fold"`` job); returns how many folds were stored."""


class AsyncMemoryService(Twin[MemoryService]):
    """Async twin of ``MemoryService`` (``keep.memory``)."""

    recall_mode = mirror(MemoryService.recall_mode)

    @bridged
    async def start(self) -> None:
        """Check what recall by meaning needs in the database (``AsyncChatkeep`` runs it
        when it opens the database)."""

    @bridged
    async def distil(self, session: str | AnySession) -> DistilResult:
        """Turn the session's undistilled messages into memories."""

    @bridged
    async def run_job(self, session_id: str) -> None:
        """The ``"distil"`` job: ``distil`` with a distillation failure logged."""

    @bridged
    async def dispatch_distil(self, session: AnySession) -> None:
        """Queue the ``"distil"`` job for ``session``."""

    @bridged
    async def rewind(self, session_id: str, through_seq: int = 0) -> bool:
        """Make the next ``distil`` re-read messages after ``through_seq``."""

    @bridged
    async def claim_idle(self, idle_after: timedelta | None = None,
                         batch_size: int | None = None) -> list[str]:
        """Claim idle sessions with undistilled messages."""

    @bridged
    async def sweep(self, idle_after: timedelta | None = None,
                    batch_size: int | None = None) -> list[str]:
        """Dispatch ``"distil"`` for idle sessions with undistilled messages."""

    @bridged
    async def recall(self, session: AnySession, query: str | None = None,
                     limit: int | None = None) -> list[Memory]:
        """Live memories that apply to ``session``, never another tenant's."""

    @bridged
    async def provider(self, session: AnySession) -> list[Memory]:
        """Memories for ``build_history``."""

    @bridged
    async def list(self, tenant: Ref, *, scope: Scope | str | None = None,
                   actor: Ref | None = None, subject: Ref | None = None,
                   include_superseded: bool = False, include_expired: bool = True,
                   limit: int = 100) -> list[Memory]:
        """A tenant's memories for review, newest first."""

    @bridged
    async def add(self, tenant: Ref, content: str, *, scope: Scope | str = Scope.TENANT,
                  subject: Ref | None = None, actor: Ref | None = None) -> Memory:
        """Store ``content`` as a live memory of ``tenant``, as if distilled."""

    @bridged
    async def get(self, tenant: Ref, memory_id: int) -> Memory:
        """The memory ``memory_id`` of ``tenant`` (``MemoryNotFound`` when none)."""

    @bridged
    async def update(self, tenant: Ref, memory_id: int, content: str) -> Memory:
        """Supersede the live memory ``memory_id`` by a new version holding ``content``."""

    @bridged
    async def delete(self, tenant: Ref, memory_id: int) -> bool:
        """Erase the memory ``memory_id`` of ``tenant`` and its earlier versions."""

    @bridged
    async def set_expiry(self, tenant: Ref, memory_id: int, ttl: timedelta | None) -> Memory:
        """Make the memory ``memory_id`` of ``tenant`` expire ``ttl`` from now (``None``:
        never)."""

    @bridged
    async def vector_status(self, tenant: Ref | None = None) -> VectorStatus | None:
        """Live memories with and without a vector of the configured model."""

    @bridged
    async def embed_missing(self, batch_size: int | None = None,
                            progress: Callable[[int], None] | None = None,
                            limit: int | None = None) -> EmbedResult:
        """Embed every live memory without a vector of the configured model (awaited
        batches through ``openai.AsyncOpenAI``)."""

    @bridged
    async def forget(self, tenant: Ref, actor: Ref | None = None, *,
                     whole_tenant: bool = False) -> int:
        """Erase an actor's personal memories, or a whole tenant's memories."""


class AsyncPrivacyGuard(Twin[PrivacyGuard]):
    """Async twin of ``PrivacyGuard`` (``keep.privacy``)."""

    @bridged
    async def redacts(self, session: AnySession) -> bool:
        """Both switches on: the application's and this conversation's."""

    @bridged
    async def scrub(self, session: AnySession, payload: T, context: str | None = None) -> T:
        """A framework's request body with no raw value, placeholders stored first."""

    @bridged
    async def restore_payload(self, session: AnySession, payload: T) -> T:
        """``restore`` over every string of a JSON-like value."""

    @bridged
    async def vault(self, session: AnySession) -> PlaceholderVault:
        """The session's placeholder mapping as stored."""

    @bridged
    async def restore(self, session: AnySession, text: str) -> str:
        """Put real values back into model output (only while the session redacts)."""

    @bridged
    async def restorer(self, session: AnySession) -> StreamRestorer:
        """A :class:`~chatkeep.privacy.streaming.StreamRestorer` for ``session``'s output."""

    @bridged
    async def restore_stored(self, session: AnySession, text: str) -> str:
        """Restore text chatkeep stored in placeholder form (a summary)."""

    @bridged
    async def store_form(self, session: AnySession, text: str) -> str:
        """How to store model-written text so ``restore_stored`` reads it right."""

    @bridged
    async def sealed_values(self, session: AnySession, text: str) -> str | None:
        """The personal values ``text`` holds, sealed (what a memory carries)."""

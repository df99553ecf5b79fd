"""Async twins of the compressor, the memory service and the privacy guard.

Each method is the sync core's method run through the bridge: one implementation of
the rules (what folds, what replays, what is redacted, what the distiller writes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from chatkeep.aio.sessions import AsyncChatSession, core_session
from chatkeep.formats import AnthropicHistory, History
from chatkeep.formats.openai_chat import ChatHistory
from chatkeep.formats.openai_responses import ResponsesHistory
from chatkeep.memory.distiller import DistilResult
from chatkeep.memory.recall import Memory
from chatkeep.memory.scopes import Scope
from chatkeep.memory.service import EmbedResult
from chatkeep.privacy.vault import PlaceholderVault
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import VectorStatus

if TYPE_CHECKING:
    from chatkeep.aio.app import AsyncChatkeep

AnySession = ChatSession | AsyncChatSession
T = TypeVar("T")


class AsyncHistoryCompressor:
    """Async twin of ``HistoryCompressor`` (``keep.compressor``)."""

    def __init__(self, keep: AsyncChatkeep) -> None:
        self._keep = keep

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["openai_chat"] = "openai_chat") -> ChatHistory: ...

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["openai_responses"]) -> ResponsesHistory: ...

    @overload
    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: Literal["anthropic_messages"]) -> AnthropicHistory: ...

    async def build_history(self, session: AnySession, system_prompt: str, *,
                            memories: Sequence[str] | None = None,
                            format: str = "openai_chat") -> History[Any]:
        """The messages to send next (see ``HistoryCompressor.build_history``); the
        summariser and the distiller it dispatches are awaited, never block the loop."""
        core = await self._keep.core()
        result: History[Any] = await self._keep.run(
            core.compressor.build_history,  # type: ignore[arg-type]
            core_session(session), system_prompt, memories=memories, format=format)
        return result


class AsyncMemoryService:
    """Async twin of ``MemoryService`` (``keep.memory``)."""

    def __init__(self, keep: AsyncChatkeep) -> None:
        self._keep = keep

    async def distil(self, session: str | AnySession) -> DistilResult:
        """Turn the session's undistilled messages into memories."""
        core = await self._keep.core()
        target = session if isinstance(session, str) else core_session(session)
        return await self._keep.run(core.memory.distil, target)

    async def run_job(self, session_id: str) -> None:
        """The ``"distil"`` job: ``distil`` with a distillation failure logged."""
        core = await self._keep.core()
        await self._keep.run(core.memory.run_job, session_id)

    async def dispatch_distil(self, session: AnySession) -> None:
        """Queue the ``"distil"`` job for ``session``."""
        core = await self._keep.core()
        await self._keep.run(core.memory.dispatch_distil, core_session(session))

    async def start(self) -> None:
        """Async twin of ``MemoryService.start`` (``AsyncChatkeep`` runs it on first use)."""
        core = await self._keep.core()
        await self._keep.run(core.memory.start)

    async def rewind(self, session_id: str, through_seq: int = 0) -> bool:
        """Make the next ``distil`` re-read messages after ``through_seq``."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.rewind, session_id, through_seq)

    async def claim_idle(self, idle_after: timedelta | None = None,
                         batch_size: int | None = None) -> list[str]:
        """Claim idle sessions with undistilled messages."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.claim_idle, idle_after, batch_size)

    async def sweep(self, idle_after: timedelta | None = None,
                    batch_size: int | None = None) -> list[str]:
        """Dispatch ``"distil"`` for idle sessions with undistilled messages."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.sweep, idle_after, batch_size)

    async def recall(self, session: AnySession, query: str | None = None,
                     limit: int | None = None) -> list[Memory]:
        """Live memories that apply to ``session``, never another tenant's."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.recall, core_session(session), query, limit)

    async def provider(self, session: AnySession) -> list[Memory]:
        """Memories for ``build_history``."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.provider, core_session(session))

    async def list(self, tenant: Ref, *, scope: Scope | str | None = None,
                   actor: Ref | None = None, subject: Ref | None = None,
                   include_superseded: bool = False, limit: int = 100) -> list[Memory]:
        """A tenant's memories for review, newest first."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.list, tenant, scope=scope, actor=actor,
                                    subject=subject, include_superseded=include_superseded,
                                    limit=limit)

    @property
    def recall_mode(self) -> str:
        """``"hybrid"`` (full text and vectors) or ``"full-text only"`` (no embedder)."""
        return "hybrid" if self._keep.embedder is not None else "full-text only"

    async def vector_status(self, tenant: Ref | None = None) -> VectorStatus | None:
        """Live memories with and without a vector of the configured model."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.vector_status, tenant)

    async def embed_missing(self, batch_size: int | None = None,
                            progress: Callable[[int], None] | None = None,
                            limit: int | None = None) -> EmbedResult:
        """Embed every live memory without a vector of the configured model (awaited
        batches through ``openai.AsyncOpenAI``)."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.embed_missing, batch_size, progress, limit)

    async def forget(self, tenant: Ref, actor: Ref | None = None, *,
                     whole_tenant: bool = False) -> int:
        """Erase an actor's personal memories, or a whole tenant's memories."""
        core = await self._keep.core()
        return await self._keep.run(core.memory.forget, tenant, actor,
                                    whole_tenant=whole_tenant)


class AsyncPrivacyGuard:
    """Async twin of ``PrivacyGuard`` (``keep.privacy``)."""

    def __init__(self, keep: AsyncChatkeep) -> None:
        self._keep = keep

    async def redacts(self, session: AnySession) -> bool:
        """Both switches on: the application's and this conversation's."""
        core = await self._keep.core()
        return core.privacy.redacts(core_session(session))

    async def scrub(self, session: AnySession, payload: T) -> T:
        """A framework's request body with no raw value, placeholders stored first."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.scrub, core_session(session), payload)

    async def restore_payload(self, session: AnySession, payload: T) -> T:
        """``restore`` over every string of a JSON-like value."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.restore_payload, core_session(session),
                                    payload)

    async def vault(self, session: AnySession) -> PlaceholderVault:
        """The session's placeholder mapping as stored."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.vault, core_session(session))

    async def restore(self, session: AnySession, text: str) -> str:
        """Put real values back into model output (only while the session redacts)."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.restore, core_session(session), text)

    async def restore_stored(self, session: AnySession, text: str) -> str:
        """Restore text chatkeep stored in placeholder form (a summary)."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.restore_stored, core_session(session), text)

    async def store_form(self, session: AnySession, text: str) -> str:
        """How to store model-written text so ``restore_stored`` reads it right."""
        core = await self._keep.core()
        return core.privacy.store_form(core_session(session), text)

    async def sealed_values(self, session: AnySession, text: str) -> str | None:
        """The personal values ``text`` holds, sealed (what a memory carries)."""
        core = await self._keep.core()
        return await self._keep.run(core.privacy.sealed_values, core_session(session), text)

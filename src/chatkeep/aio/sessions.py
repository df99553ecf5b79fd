"""``AsyncChatSession`` and ``AsyncSessionService``: async twins of the sync session API.

Each method is the sync core's own method run through the bridge (see
:mod:`chatkeep.aio.twins`): same names, same arguments, same checks and errors, awaited.
Properties read the row snapshot the last call returned and never do I/O; what reads the
database is a method (``read_messages()`` for ``messages``).
"""

# mypy: disable-error-code="empty-body"
# (The bodies of @bridged methods are supplied by the decorator.)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chatkeep.aio.twins import Twin, bridged, mirror
from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession, SessionService

__all__ = ["AsyncChatSession", "AsyncSessionService", "core_session"]


class AsyncChatSession(Twin[ChatSession]):
    """Async twin of ``ChatSession``."""

    def __repr__(self) -> str:
        return "Async" + repr(self.core)

    # -- identity and state: the row snapshot, no I/O -----------------------------------

    id = mirror(ChatSession.id)
    tenant = mirror(ChatSession.tenant)
    actor = mirror(ChatSession.actor)
    subject = mirror(ChatSession.subject)
    key = mirror(ChatSession.key)
    title = mirror(ChatSession.title)
    row = mirror(ChatSession.row)
    total_tokens = mirror(ChatSession.total_tokens)
    summary = mirror(ChatSession.summary)
    structured_summary = mirror(ChatSession.structured_summary)
    summary_watermark = mirror(ChatSession.summary_watermark)
    message_count = mirror(ChatSession.message_count)
    closed = mirror(ChatSession.closed)
    metadata = mirror(ChatSession.metadata)
    anonymize_pii = mirror(ChatSession.anonymize_pii)

    # -- reading and state changes --------------------------------------------------------

    @bridged
    async def refresh(self) -> AsyncChatSession:
        """Re-read the row (another process may have written)."""

    @bridged
    async def close(self) -> None:
        """Refuse further messages; the record stays readable."""

    @bridged
    async def set_anonymize_pii(self, value: bool) -> None:
        """Switch redaction for this conversation (the app switch must be on too)."""

    @bridged
    async def read_messages(self) -> list[Message]:
        """Every message in order, tool plumbing and retracted ones included."""

    @bridged
    async def messages_after(self, seq: int) -> list[Message]:
        """Messages with ``seq`` greater than ``seq``."""

    @bridged
    async def retract_last(self) -> Message | None:
        """Retract the newest live message (kept, marked, never replayed); returns it."""

    @bridged
    async def retract_all(self) -> int:
        """Retract every live message and the summary; returns how many messages."""

    @bridged
    async def delete_last(self) -> int | None:
        """Remove the newest live message's bytes (``pop_item``); returns its seq."""

    @bridged
    async def pop_last(self) -> Message | None:
        """Remove the newest live message's bytes and return it as it was (``pop_item``)."""

    @bridged
    async def clear(self) -> int:
        """Remove every message's bytes, the summary and the vault (``clear_session``)."""

    # -- writing ---------------------------------------------------------------------------

    @bridged
    async def add_user(self, content: str, *, name: str | None = None,
                       metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a user message."""

    @bridged
    async def add_system(self, content: str, *,
                         metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an instruction added mid-session (replayed pinned)."""

    @bridged
    async def add_assistant(self, content: str | None = None, *,
                            tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                            usage: Usage | None = None, model: str | None = None,
                            metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an assistant turn: text, tool calls, or both."""

    @bridged
    async def add_assistant_response(self, response: Any, *,
                                     metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a model's answer as the provider SDK returned it (any wire format)."""

    @bridged
    async def record(self, payload: Any, *, format: str) -> list[Message]:
        """Record request-side messages of a wire format, atomically."""

    @bridged
    async def add_drafts(self, drafts: Sequence[MessageDraft]) -> list[Message]:
        """Validate and append several messages in one transaction."""

    @bridged
    async def add_tool_result(self, tool_call_id: str,
                              content: str | Mapping[str, Any] | list[Any], *,
                              name: str | None = None,
                              metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a tool's result for an earlier, unanswered call."""

    @bridged
    async def add_message(self, role: Role | str, content: str | None, *,
                          tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                          tool_call_id: str | None = None, name: str | None = None,
                          usage: Usage | None = None, model: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> Message:
        """Validate and append any message."""

    @bridged
    async def add_tokens(self, n: int, *, purpose: str = "manual",
                         model: str | None = None) -> int:
        """Bill ``n`` tokens to this session; returns the new total."""

    @bridged
    async def record_usage(self, purpose: str, usage: Usage,
                           model: str | None = None) -> int:
        """Bill a model call made on this session's behalf; returns the new total."""


class AsyncSessionService(Twin[SessionService]):
    """Async twin of ``SessionService`` (``keep.sessions``)."""

    @bridged
    async def create(self, tenant: Ref, actor: Ref | None = None, subject: Ref | None = None,
                     *, title: str | None = None, anonymize_pii: bool = True,
                     metadata: Mapping[str, Any] | None = None) -> AsyncChatSession:
        """Start a conversation owned by ``tenant``; ``actor=None`` is an autonomous run."""

    @bridged
    async def open(self, key: str, tenant: Ref, actor: Ref | None = None,
                   subject: Ref | None = None, *, title: str | None = None,
                   anonymize_pii: bool = True,
                   metadata: Mapping[str, Any] | None = None) -> AsyncChatSession:
        """The tenant's conversation named by the application's ``key``, created on first
        use (see ``SessionService.open``)."""

    @bridged
    async def by_key(self, key: str, tenant: Ref) -> AsyncChatSession:
        """The tenant's conversation named ``key`` (``SessionNotFound`` if none)."""

    @bridged
    async def get(self, session_id: str, tenant: Ref) -> AsyncChatSession:
        """Load one of ``tenant``'s sessions (another tenant's is ``SessionNotFound``)."""

    @bridged
    async def get_unscoped(self, session_id: str) -> AsyncChatSession:
        """Load a session by its id alone, whatever its tenant (jobs, operators' tools)."""

    @bridged
    async def tenant_of(self, session_id: str) -> Ref:
        """The tenant that owns ``session_id`` (what a job bills)."""

    @bridged
    async def list(self, tenant: Ref, *, actor: Ref | None = None,
                   subject: Ref | None = None, limit: int = 50) -> list[AsyncChatSession]:
        """A tenant's sessions, most recently active first."""

    @bridged
    async def delete(self, session_id: str, tenant: Ref, *,
                     by: str | None = None) -> dict[str, int]:
        """Delete one of ``tenant``'s conversations and every row holding its content."""


def core_session(session: ChatSession | AsyncChatSession) -> ChatSession:
    """The sync session behind ``session`` (async services accept either)."""
    return session.core if isinstance(session, AsyncChatSession) else session

"""What the store hands out: plain snapshots of rows, and the conversions from result rows.

Shared by the repository's SQLAlchemy path and the direct driver paths
(:mod:`chatkeep.store.direct`), so both give the same values.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.refs import Ref


def utcnow() -> datetime:
    """Aware UTC now (the one clock the store uses, replaceable in tests)."""
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def time_ordered_id() -> str:
    """A time-ordered UUID (version 7 layout): ids sort by creation and index well (a
    new key lands at the index's right edge; for rows deleted soon after, such as a
    quota reservation, the dead entries gather there instead of across the index)."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10)) & ((1 << 74) - 1)
    high = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64)
    h = f"{high | (0b10 << 62) | (rand & ((1 << 62) - 1)):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"  # str(uuid.UUID(int=...))


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A snapshot of one ``chat_sessions`` row."""

    id: str
    tenant: Ref
    actor: Ref | None
    subject: Ref | None
    title: str | None
    anonymize_pii: bool
    total_tokens: int
    last_seq: int
    summary: str | None
    summary_watermark: int
    summary_version: int
    distilled_through: int
    distil_version: int
    pii_vault: str | None
    pii_vault_version: int
    pii_protected: bool
    """Redacted under the application's switch: every process must keep redacting it."""
    closed_at: datetime | None
    last_message_at: datetime
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    """The application's own name for the conversation, unique per tenant (or ``None``)."""
    fold_lease_until: datetime | None = None
    """Until when a caller holds the claim on the next fold (``None``: nobody)."""
    fold_failures: int = 0
    """Failed folds in a row (0 after a fold is stored)."""
    fold_retry_at: datetime | None = None
    """No fold is tried before this, after a failure (``None``: no back-off)."""


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One group of the usage report."""

    tenant: Ref
    purpose: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    calls: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens of the group."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class BilledUsage:
    """Usage to record with a write: ``purpose`` is chat, summary, distil or manual."""

    purpose: str
    usage: Usage
    model: str | None = None


SESSION_FIELDS = (
    "id", "tenant_type", "tenant_id", "tenant_id_int", "actor_type", "actor_id", "actor_id_int",
    "subject_type", "subject_id", "subject_id_int", "title", "anonymize_pii", "total_tokens",
    "last_seq", "summary", "summary_watermark", "summary_version", "distilled_through",
    "distil_version", "distil_lease_until", "pii_vault", "pii_vault_version", "pii_protected",
    "closed_at", "last_message_at", "created_at", "metadata", "key", "fold_lease_until",
    "fold_failures", "fold_retry_at")
"""The ``chat_sessions`` columns in table order: what every session read selects."""


def session_from_row(row: Sequence[Any]) -> SessionRow:
    """A row of :data:`SESSION_FIELDS` (a result row, or the driver's tuple) as a
    ``SessionRow``, read by position (two or three of these every turn)."""
    (id_, tenant_type, tenant_id, tenant_int, actor_type, actor_id, actor_int, subject_type,
     subject_id, subject_int, title, anonymize_pii, total_tokens, last_seq, summary,
     summary_watermark, summary_version, distilled_through, distil_version, _lease,
     pii_vault, pii_vault_version, pii_protected, closed_at, last_message_at, created_at,
     metadata, key, lease_until, fold_failures, retry_at) = row
    tenant = Ref.from_columns(tenant_type, tenant_id, tenant_int)
    assert tenant is not None
    return SessionRow(
        id_, tenant, Ref.from_columns(actor_type, actor_id, actor_int),
        Ref.from_columns(subject_type, subject_id, subject_int), title, bool(anonymize_pii),
        int(total_tokens), int(last_seq), summary, int(summary_watermark),
        int(summary_version), int(distilled_through), int(distil_version), pii_vault,
        int(pii_vault_version), bool(pii_protected), as_utc(closed_at),
        as_utc(last_message_at) or utcnow(), as_utc(created_at) or utcnow(),
        dict(metadata or {}), key, as_utc(lease_until), int(fold_failures or 0),
        as_utc(retry_at))


def new_messages(session: SessionRow, now: datetime,
                 batch: Sequence[tuple[MessageDraft, int | None, Any]]) -> list[Message]:
    """The messages a batch append writes into the seqs it claimed (consecutive, ending at
    ``session.last_seq`` as the claim left it), one clock (shared by the SQLAlchemy path
    and the direct driver paths)."""
    first = session.last_seq - len(batch) + 1
    return [Message(session.id, first + offset, draft.role, draft.content, draft.tool_calls,
                    draft.tool_call_id, draft.name, tokens, now, dict(draft.metadata),
                    dict(draft.native))
            for offset, (draft, tokens, _) in enumerate(batch)]


MESSAGE_FIELDS = ("session_id", "seq", "role", "content", "tool_calls", "tool_call_id",
                  "name", "tokens", "created_at", "metadata", "native", "retracted_at")
"""The ``chat_messages`` columns every message read selects, in this order."""


def message_from_row(row: Sequence[Any]) -> Message:
    """A row of :data:`MESSAGE_FIELDS` (a result row, or the driver's tuple) as a
    ``Message``: read by position, the cheapest way for every message of every turn."""
    (session_id, seq, role, content, tool_calls, tool_call_id, name, tokens, created_at,
     metadata, native, retracted_at) = row
    return Message(
        session_id, int(seq), ROLES.get(role) or Role(role), content,
        tuple(ToolCall.from_openai(c) for c in tool_calls) if tool_calls else (),
        tool_call_id, name, tokens, as_utc(created_at), dict(metadata or {}),
        dict(native or {}), as_utc(retracted_at))


ROLES = {role.value: role for role in Role}
"""A stored role's text -> the ``Role`` (a dict lookup: ``Role(text)`` costs more, and a
turn reads every message of its unfolded tail)."""


def split_at(messages: list[Message], watermark: int) -> tuple[list[Message], list[Message]]:
    """Messages in seq order -> (those at or below ``watermark``, those after it)."""
    split = next((i for i, m in enumerate(messages) if m.seq > watermark), len(messages))
    return messages[:split], messages[split:]

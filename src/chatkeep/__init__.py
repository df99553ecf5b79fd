"""chatkeep: durable, multi-tenant chat sessions with a history inside a token budget.

Start with ``Chatkeep(database_url)``; see README.md for the tour.

The names below load on first use (PEP 562), so ``import chatkeep`` and
``chatkeep --version`` do not pay for SQLAlchemy, the SDKs and the recognizers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatkeep.app import Chatkeep
    from chatkeep.config import Config
    from chatkeep.errors import (
        ChatkeepError,
        ConfigError,
        ConnectionLost,
        DistillationError,
        DumpWriteError,
        ForeignThreadState,
        HoldNotFound,
        IncompleteToolTurn,
        InvalidArgument,
        InvalidDump,
        InvalidMessage,
        InvalidReference,
        InvalidTokens,
        KeepClosed,
        MemoryNotFound,
        ModelError,
        PrivacyError,
        QuotaExceeded,
        ScopeOnHold,
        SessionClosed,
        SessionKeyConflict,
        SessionNotFound,
        StoreError,
        SummaryReplyError,
        UnknownJob,
    )
    from chatkeep.formats import AnthropicHistory, History, HistoryInfo
    from chatkeep.history import HistoryCompressor
    from chatkeep.memory import DistilResult, Memory, MemoryService, Retriever, Scope
    from chatkeep.messages import AssistantTurn, Message, MessageDraft, Role, ToolCall, Usage
    from chatkeep.refs import Ref
    from chatkeep.sessions import ChatSession

#: Each public name and the module that defines it.
_EXPORTS = {
    "AnthropicHistory": "chatkeep.formats",
    "AssistantTurn": "chatkeep.messages",
    "ChatSession": "chatkeep.sessions",
    "Chatkeep": "chatkeep.app",
    "ChatkeepError": "chatkeep.errors",
    "Config": "chatkeep.config",
    "ConfigError": "chatkeep.errors",
    "ConnectionLost": "chatkeep.errors",
    "DistilResult": "chatkeep.memory",
    "DistillationError": "chatkeep.errors",
    "DumpWriteError": "chatkeep.errors",
    "History": "chatkeep.formats",
    "HistoryCompressor": "chatkeep.history",
    "HistoryInfo": "chatkeep.formats",
    "IncompleteToolTurn": "chatkeep.errors",
    "InvalidArgument": "chatkeep.errors",
    "InvalidDump": "chatkeep.errors",
    "InvalidMessage": "chatkeep.errors",
    "InvalidReference": "chatkeep.errors",
    "InvalidTokens": "chatkeep.errors",
    "ForeignThreadState": "chatkeep.errors",
    "KeepClosed": "chatkeep.errors",
    "Memory": "chatkeep.memory",
    "MemoryNotFound": "chatkeep.errors",
    "MemoryService": "chatkeep.memory",
    "Message": "chatkeep.messages",
    "MessageDraft": "chatkeep.messages",
    "ModelError": "chatkeep.errors",
    "PrivacyError": "chatkeep.errors",
    "Ref": "chatkeep.refs",
    "Retriever": "chatkeep.memory",
    "Role": "chatkeep.messages",
    "Scope": "chatkeep.memory",
    "SessionClosed": "chatkeep.errors",
    "SessionKeyConflict": "chatkeep.errors",
    "SessionNotFound": "chatkeep.errors",
    "QuotaExceeded": "chatkeep.errors",
    "ScopeOnHold": "chatkeep.errors",
    "HoldNotFound": "chatkeep.errors",
    "StoreError": "chatkeep.errors",
    "SummaryReplyError": "chatkeep.errors",
    "ToolCall": "chatkeep.messages",
    "UnknownJob": "chatkeep.errors",
    "Usage": "chatkeep.messages",
}

__all__ = [
    "AnthropicHistory",
    "AssistantTurn",
    "ChatSession",
    "Chatkeep",
    "ChatkeepError",
    "Config",
    "ConfigError",
    "ConnectionLost",
    "DistilResult",
    "DistillationError",
    "DumpWriteError",
    "ForeignThreadState",
    "History",
    "HistoryCompressor",
    "HistoryInfo",
    "HoldNotFound",
    "IncompleteToolTurn",
    "InvalidArgument",
    "InvalidDump",
    "InvalidMessage",
    "InvalidReference",
    "InvalidTokens",
    "KeepClosed",
    "Memory",
    "MemoryNotFound",
    "MemoryService",
    "Message",
    "MessageDraft",
    "ModelError",
    "PrivacyError",
    "QuotaExceeded",
    "Ref",
    "Retriever",
    "Role",
    "Scope",
    "ScopeOnHold",
    "SessionClosed",
    "SessionKeyConflict",
    "SessionNotFound",
    "StoreError",
    "SummaryReplyError",
    "ToolCall",
    "UnknownJob",
    "Usage",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chatkeep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

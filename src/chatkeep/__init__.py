"""chatkeep: durable, multi-tenant chat sessions with a history inside a token budget.

Start with ``Chatkeep(database_url)``; see README.md for the tour.
"""

from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import (
    ChatkeepError,
    ConfigError,
    DistillationError,
    IncompleteToolTurn,
    InvalidArgument,
    InvalidMessage,
    InvalidReference,
    InvalidTokens,
    KeepClosed,
    ModelError,
    PrivacyError,
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

__all__ = [
    "AnthropicHistory",
    "AssistantTurn",
    "ChatSession",
    "Chatkeep",
    "ChatkeepError",
    "Config",
    "ConfigError",
    "DistilResult",
    "DistillationError",
    "History",
    "HistoryCompressor",
    "HistoryInfo",
    "IncompleteToolTurn",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidReference",
    "InvalidTokens",
    "KeepClosed",
    "Memory",
    "MemoryService",
    "Message",
    "MessageDraft",
    "ModelError",
    "PrivacyError",
    "Ref",
    "Retriever",
    "Role",
    "Scope",
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

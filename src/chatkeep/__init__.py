"""chatkeep: durable, multi-tenant chat sessions with a history inside a token budget.

Start with ``Chatkeep(database_url)``; see README.md for the tour.

The names below load on first use (PEP 562), so ``import chatkeep`` and
``chatkeep --version`` do not pay for SQLAlchemy, the SDKs and the recognizers. Each is
written once, in ``_EXPORTS``; ``__all__`` and the loader derive from it, and the
``TYPE_CHECKING`` imports mirror it for type checkers and IDEs (tests/test_exports.py
checks the mirror).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkeep._exports import lazy_exports

if TYPE_CHECKING:
    from chatkeep.app import Chatkeep as Chatkeep
    from chatkeep.config import Config as Config
    from chatkeep.errors import ChatkeepError as ChatkeepError
    from chatkeep.errors import ConfigError as ConfigError
    from chatkeep.errors import ConnectionLost as ConnectionLost
    from chatkeep.errors import DistillationError as DistillationError
    from chatkeep.errors import DumpWriteError as DumpWriteError
    from chatkeep.errors import ForeignThreadState as ForeignThreadState
    from chatkeep.errors import HoldNotFound as HoldNotFound
    from chatkeep.errors import IncompleteToolTurn as IncompleteToolTurn
    from chatkeep.errors import InvalidArgument as InvalidArgument
    from chatkeep.errors import InvalidDump as InvalidDump
    from chatkeep.errors import InvalidMessage as InvalidMessage
    from chatkeep.errors import InvalidReference as InvalidReference
    from chatkeep.errors import InvalidTokens as InvalidTokens
    from chatkeep.errors import KeepClosed as KeepClosed
    from chatkeep.errors import MemoryNotFound as MemoryNotFound
    from chatkeep.errors import ModelError as ModelError
    from chatkeep.errors import PrivacyError as PrivacyError
    from chatkeep.errors import QuotaExceeded as QuotaExceeded
    from chatkeep.errors import ScopeOnHold as ScopeOnHold
    from chatkeep.errors import SessionClosed as SessionClosed
    from chatkeep.errors import SessionKeyConflict as SessionKeyConflict
    from chatkeep.errors import SessionNotFound as SessionNotFound
    from chatkeep.errors import StoreError as StoreError
    from chatkeep.errors import SummaryReplyError as SummaryReplyError
    from chatkeep.errors import TurnNotFound as TurnNotFound
    from chatkeep.errors import TurnNotRecorded as TurnNotRecorded
    from chatkeep.errors import UnknownJob as UnknownJob
    from chatkeep.formats import AnthropicHistory as AnthropicHistory
    from chatkeep.formats import History as History
    from chatkeep.formats import HistoryInfo as HistoryInfo
    from chatkeep.history import HistoryCompressor as HistoryCompressor
    from chatkeep.memory import DistilResult as DistilResult
    from chatkeep.memory import Memory as Memory
    from chatkeep.memory import MemoryService as MemoryService
    from chatkeep.memory import Retriever as Retriever
    from chatkeep.memory import Scope as Scope
    from chatkeep.messages import AssistantTurn as AssistantTurn
    from chatkeep.messages import Message as Message
    from chatkeep.messages import MessageDraft as MessageDraft
    from chatkeep.messages import Role as Role
    from chatkeep.messages import ToolCall as ToolCall
    from chatkeep.messages import Usage as Usage
    from chatkeep.refs import Ref as Ref
    from chatkeep.sessions import ChatSession as ChatSession

#: Each public name, under the module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "chatkeep.app": ("Chatkeep",),
    "chatkeep.config": ("Config",),
    "chatkeep.errors": (
        "ChatkeepError", "ConfigError", "ConnectionLost", "DistillationError", "DumpWriteError",
        "ForeignThreadState", "HoldNotFound", "IncompleteToolTurn", "InvalidArgument",
        "InvalidDump", "InvalidMessage", "InvalidReference", "InvalidTokens", "KeepClosed",
        "MemoryNotFound", "ModelError", "PrivacyError", "QuotaExceeded", "ScopeOnHold",
        "SessionClosed", "SessionKeyConflict", "SessionNotFound", "StoreError",
        "SummaryReplyError", "TurnNotFound", "TurnNotRecorded", "UnknownJob",
    ),
    "chatkeep.formats": ("AnthropicHistory", "History", "HistoryInfo"),
    "chatkeep.history": ("HistoryCompressor",),
    "chatkeep.memory": ("DistilResult", "Memory", "MemoryService", "Retriever", "Scope"),
    "chatkeep.messages": ("AssistantTurn", "Message", "MessageDraft", "Role", "ToolCall", "Usage"),
    "chatkeep.refs": ("Ref",),
    "chatkeep.sessions": ("ChatSession",),
}

__version__ = "0.1.0"

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

"""chatkeep's async API: the same names as the sync one, awaited.

``import chatkeep`` loads no async driver; ``from chatkeep.aio import AsyncChatkeep``
does. One implementation of every rule serves both (see :mod:`chatkeep.aio.bridge`).
"""

from chatkeep.aio.app import AsyncChatkeep
from chatkeep.aio.dispatch import TaskDispatcher
from chatkeep.aio.lifecycle import AsyncHoldService, AsyncRetentionService
from chatkeep.aio.quotas import AsyncQuotaService, AsyncReservation
from chatkeep.aio.services import AsyncHistoryCompressor, AsyncMemoryService, AsyncPrivacyGuard
from chatkeep.aio.sessions import AsyncChatSession, AsyncSessionService
from chatkeep.errors import KeepClosed
from chatkeep.llm.base import AsyncChatModel
from chatkeep.llm.openai_client import AsyncOpenAIChatModel

__all__ = [
    "AsyncChatModel",
    "AsyncChatSession",
    "AsyncChatkeep",
    "AsyncHistoryCompressor",
    "AsyncHoldService",
    "AsyncMemoryService",
    "AsyncOpenAIChatModel",
    "AsyncPrivacyGuard",
    "AsyncQuotaService",
    "AsyncReservation",
    "AsyncRetentionService",
    "AsyncSessionService",
    "KeepClosed",
    "TaskDispatcher",
]

"""Which keep an adapter object holds: ``Chatkeep`` (sync) or ``AsyncChatkeep`` (async).

``chatkeep.aio`` (and its async drivers) is never imported here: a keep can only be an
``AsyncChatkeep`` once its module was imported, so a sync application of the
``langchain`` extra needs no async driver installed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

from chatkeep.app import Chatkeep
from chatkeep.errors import ConfigError

if TYPE_CHECKING:
    from chatkeep.aio import AsyncChatkeep

__all__ = ["check_keep", "is_async_keep"]


def is_async_keep(keep: object) -> TypeGuard[AsyncChatkeep]:
    """Whether ``keep`` is an ``AsyncChatkeep``."""
    if isinstance(keep, Chatkeep) or "chatkeep.aio" not in sys.modules:
        return False
    from chatkeep.aio import AsyncChatkeep

    return isinstance(keep, AsyncChatkeep)


def check_keep(keep: object, who: str) -> Chatkeep | AsyncChatkeep:
    """``keep`` if it is a ``Chatkeep`` or an ``AsyncChatkeep``; else ``ConfigError``."""
    if isinstance(keep, Chatkeep) or is_async_keep(keep):
        return keep
    raise ConfigError(f"{who} needs a Chatkeep or an AsyncChatkeep, got {type(keep).__name__}")

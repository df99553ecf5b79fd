"""Typed errors: every failure chatkeep reports on purpose is a ``ChatkeepError``.

Callers can catch the base class, or a precise subclass when they want to react
differently (a missing session is a 404, an invalid message is a 400, ...).
"""

from __future__ import annotations


class ChatkeepError(Exception):
    """Base class of every error chatkeep raises on purpose."""


class ConfigError(ChatkeepError, ValueError):
    """A configuration key or value is unknown or of the wrong type."""


class InvalidArgument(ChatkeepError, ValueError):
    """An argument combination or value a call cannot take (e.g. ``forget`` with neither
    an actor nor ``whole_tenant``)."""


class InvalidReference(ChatkeepError, ValueError):
    """A tenant/actor/subject reference is empty or malformed."""


class InvalidMessage(ChatkeepError, ValueError):
    """A message cannot be recorded: unknown role, orphan tool result, bad content."""


class IncompleteToolTurn(ChatkeepError):
    """``build_history`` was asked for while tool calls of the open turn have no result yet:
    the request would be rejected by the provider (HTTP 400), so none is built.
    ``call_ids`` names the calls waiting for ``add_tool_result``."""

    def __init__(self, call_ids: list[str]) -> None:
        self.call_ids = list(call_ids)
        super().__init__(
            "the open turn has tool calls without a result: "
            f"{', '.join(self.call_ids)}; record each with add_tool_result(call_id, ...) "
            "before building the next history")


class InvalidTokens(ChatkeepError, ValueError):
    """A token count is negative or not an integer."""


class SessionNotFound(ChatkeepError, LookupError):
    """No session with that id exists for that tenant (a wrong tenant looks the same)."""


class SessionClosed(ChatkeepError):
    """The session was closed; it can be read but not written to."""


class ModelError(ChatkeepError):
    """The language model call failed or returned something unusable."""


class DistillationError(ChatkeepError):
    """The distiller could not turn a conversation range into memories."""


class PrivacyError(ChatkeepError):
    """Redaction could not be applied (missing key, missing optional backend, ...)."""


class StoreError(ChatkeepError):
    """The database refused an operation in a way the caller should know about."""

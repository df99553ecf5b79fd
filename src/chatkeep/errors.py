"""Typed errors: every exception chatkeep raises is a ``ChatkeepError``, defined here.

Callers can catch the base class, or a precise subclass when they want to react
differently (a missing session is a 404, an invalid message is a 400, ...). Where a
builtin exception means the same, it is a base too, so ``except ValueError`` keeps
working::

    ChatkeepError
    ├── ConfigError (ValueError)          configuration, or a client of the wrong kind
    ├── InvalidArgument (ValueError)      an argument a call cannot take
    ├── InvalidReference (ValueError)     a malformed tenant / actor / subject reference
    ├── InvalidMessage (ValueError)       a message that cannot be recorded
    ├── InvalidTokens (ValueError)        a negative or non-integer token count
    ├── IncompleteToolTurn                tool calls still waiting for their results
    ├── SessionNotFound (LookupError)     no such session for that tenant
    ├── SessionKeyConflict (ValueError)   a key opened with another actor or subject
    ├── ForeignThreadState                a framework's thread state another tenant recorded
    ├── SessionClosed                     the session was closed
    ├── MemoryNotFound (LookupError)      no such memory for that tenant
    ├── ScopeOnHold                       a legal hold refuses a delete, erase or sweep
    ├── HoldNotFound (LookupError)        no such legal hold for that tenant
    ├── UnknownJob (LookupError)          a job name no handler takes
    ├── KeepClosed                        an AsyncChatkeep used after close()
    ├── TurnNotFound (LookupError)        keep.replay: the session has no such turn
    ├── TurnNotRecorded (LookupError)     keep.replay: a turn from before replay existed
    ├── ModelError                        a model or embedding call failed
    │   └── SummaryReplyError             the summarizer's JSON reply is off-shape
    ├── DistillationError                 a range could not become memories
    ├── PrivacyError                      redaction could not be applied: nothing is sent
    ├── QuotaExceeded                     a tenant's token quota cannot hold the call: nothing sent
    ├── InvalidDump (ValueError)          a dump cut short, edited, or holding rows it may not
    │                                     create: nothing is restored
    ├── DumpWriteError (OSError)          a dump could not be written (a full disk): no file
    └── StoreError                        the database refused, or cannot be reached
        └── ConnectionLost                the connection died mid-call (a restart)
"""

from __future__ import annotations

from datetime import datetime


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


class SessionKeyConflict(ChatkeepError, ValueError):
    """``sessions.open(key, ...)`` found the tenant's session of that key, but it was
    created for another actor or subject: returning it would mix two people's (or two
    matters') conversations, so nothing is returned."""


class ForeignThreadState(ChatkeepError):
    """A framework handed a run thread state that another tenant's session recorded (a
    checkpointer keyed by thread id alone, shared by tenants): nothing of it is recorded
    or sent. Scope the thread id per tenant, or give each tenant its own checkpointer
    namespace."""


class SessionClosed(ChatkeepError):
    """The session was closed; it can be read but not written to."""


class MemoryNotFound(ChatkeepError, LookupError):
    """No memory with that id exists for that tenant (a wrong tenant looks the same), or
    it was deleted."""


class ScopeOnHold(ChatkeepError):
    """A legal hold covers what a delete, an erasure or a retention sweep would remove:
    nothing was removed. ``reason`` is the hold's reason, ``hold_id`` its id."""

    def __init__(self, message: str, *, reason: str = "", hold_id: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.hold_id = hold_id


class HoldNotFound(ChatkeepError, LookupError):
    """No legal hold with that id exists for that tenant (a wrong tenant looks the same)."""


class ModelError(ChatkeepError):
    """The language model call failed or returned something unusable."""


class DistillationError(ChatkeepError):
    """The distiller could not turn a conversation range into memories."""


class PrivacyError(ChatkeepError):
    """Redaction could not be applied (missing key, missing optional backend, ...)."""


class QuotaExceeded(ChatkeepError):
    """The tenant's token quota (or its actor's) cannot hold this call's reservation: the
    call is refused before anything is sent. ``remaining`` is what the quota still holds
    (held reservations counted), ``resets_at`` when its window frees it (``None``: only
    settling held reservations frees it)."""

    def __init__(self, message: str, *, tenant: object = None, actor: object = None,
                 requested: int = 0, remaining: int = 0,
                 resets_at: datetime | None = None) -> None:
        super().__init__(message)
        self.tenant, self.actor = tenant, actor
        self.requested, self.remaining, self.resets_at = requested, remaining, resets_at


class InvalidDump(ChatkeepError, ValueError):
    """A dump ``chatkeep import`` refuses, before it writes anything: cut short, edited
    (its trailer's counts or digest disagree), a row the API would refuse, or a row that
    does not belong to what the dump itself creates (another tenant's session or scope)."""


class DumpWriteError(ChatkeepError, OSError):
    """A dump could not be written (a full disk, a closed pipe): the file it was to
    replace is untouched and no partial file is left behind."""


class StoreError(ChatkeepError):
    """The database refused an operation in a way the caller should know about."""


class UnknownJob(ChatkeepError, LookupError):
    """A job name nothing handles."""


class KeepClosed(ChatkeepError):
    """A method was awaited on an ``AsyncChatkeep`` after ``close()``."""


class TurnNotFound(ChatkeepError, LookupError):
    """``keep.replay``: the session has no such turn (each request chatkeep built for it
    is one, numbered from 1)."""


class TurnNotRecorded(ChatkeepError, LookupError):
    """``keep.replay``: the turn stands for the requests built before the database had
    replay (migration ``0015``): they were recorded without a manifest."""


class SummaryReplyError(ModelError):
    """The summarizer's JSON reply is off-shape: nothing of it is used."""


class ConnectionLost(StoreError):
    """The database connection died during the call (a server restart, a killed backend):
    nothing of the call was committed, and every pooled connection older than this one is
    replaced before it is used again. Reads are retried once on a fresh connection; a
    write is not (it may be retried by the caller, who knows whether it is safe)."""

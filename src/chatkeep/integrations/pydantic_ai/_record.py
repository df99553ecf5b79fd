"""A conversation's ``ConversationRecord`` as it lives in its session's metadata. No I/O.

The session's metadata holds, under ``"pydantic_ai"``, one of:

* ``{"record": {...}}``: the conversation's record (``ConversationRecord`` as JSON);
* ``{"deleting": token}``: a delete in progress: the record is gone, the session's
  messages are being removed (a save that finds it finishes the removal first);
* nothing: the store has no conversation for the session.
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic_ai.conversation_store import ConversationRecord

from chatkeep.integrations.pydantic_ai._convert import KEY

_RECORD = pydantic.TypeAdapter(ConversationRecord)


def state_of(metadata: Any) -> dict[str, Any] | None:
    """The integration's state in a session's metadata (``None``: none)."""
    if not isinstance(metadata, dict):
        return None
    state = metadata.get(KEY)
    return state if isinstance(state, dict) else None


def record_of(state: dict[str, Any] | None, scope: str) -> ConversationRecord | None:
    """The live record a state holds (its scope is the tenant's), or ``None``."""
    if state is None or not isinstance(state.get("record"), dict):
        return None
    record = _RECORD.validate_python(state["record"])
    record.scope = scope
    return record


def revision_of(state: dict[str, Any] | None) -> str | None:
    """The live record's revision, or ``None`` when there is no live record."""
    if state is None or not isinstance(state.get("record"), dict):
        return None
    revision = state["record"].get("revision")
    return revision if isinstance(revision, str) else None


def head_of(state: dict[str, Any] | None) -> str | None:
    """The live record's newest entry, or ``None``."""
    if state is None or not isinstance(state.get("record"), dict):
        return None
    head = state["record"].get("head_id")
    return head if isinstance(head, str) else None


def deleting(state: dict[str, Any] | None) -> str | None:
    """The token of a delete in progress, or ``None``."""
    token = state.get("deleting") if state is not None else None
    return token if isinstance(token, str) else None


def record_state(record: ConversationRecord) -> dict[str, Any]:
    """The state that stores ``record``."""
    data: dict[str, Any] = _RECORD.dump_python(record, mode="json")
    return {"record": data}

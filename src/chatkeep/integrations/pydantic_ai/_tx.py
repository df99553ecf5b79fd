"""The conversation record's compare-and-set, atomic with the messages it adds.

Pydantic AI's ``ConversationStore.write_record`` replaces a record only if its revision
is still the one the writer loaded, and stores the new messages in the same step. The
core has no such write (an append checks nothing but the session), so it is spelled
here, over the store's own pieces: one transaction on the store's executor
(:mod:`chatkeep.store.executor`) that locks the session row, reads the state this
integration keeps in the session's metadata, asks ``decide`` what to write (or to stop),
appends the batch with the core's own append (:func:`chatkeep.store.procedures.append_in`,
so seqs, tool calls and the usage ledger follow every rule of ``add_drafts``) and writes
the new state. Any error rolls all of it back.

The two statements below are the only SQL in this integration; they belong in the store
(a compare-and-set on a state in the session's metadata, beside the append), and move
there when the core grows that write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update

from chatkeep.errors import SessionNotFound
from chatkeep.integrations.pydantic_ai._convert import KEY
from chatkeep.messages import Message
from chatkeep.store.executor import CoreTransport
from chatkeep.store.procedures import Batch, append_error, append_in
from chatkeep.store.repository import Repository
from chatkeep.store.rows import SessionRow, session_from_row
from chatkeep.store.schema import chat_sessions

_S = chat_sessions.c
_LOCK = (update(chat_sessions).where(_S.id == bindparam("b_session_id"))
         .values(metadata=_S.metadata).returning(_S.metadata))
"""Take the session row's lock (a no-op write) and read its metadata as of that lock."""
_SET = (update(chat_sessions).where(_S.id == bindparam("b_session_id"))
        .values(metadata=bindparam("b_metadata", type_=_S.metadata.type))
        .returning(chat_sessions))
"""Write the session's metadata; the row after it."""


@dataclass(frozen=True, slots=True)
class Keep:
    """``decide``'s answer: leave the state as it is and write nothing."""


KEEP = Keep()
#: ``decide``'s answer: remove this integration's state from the session.
REMOVE: dict[str, Any] = {}

State = dict[str, Any] | None
Decide = Callable[[State], "dict[str, Any] | Keep"]


def swap(repository: Repository, session_id: str, decide: Decide,
         batch: Batch = ()) -> tuple[list[Message], SessionRow | None]:
    """In one transaction: lock the session, hand ``decide`` the stored state, and unless
    it answers :data:`KEEP`, append ``batch`` and store the state it returned
    (:data:`REMOVE` removes it). Returns the appended messages and the row after the
    write (``None`` when nothing was written). ``decide`` refuses by raising."""
    transport = CoreTransport(repository.engine)
    try:
        with transport.transaction() as ex:
            locked = ex.rows(_LOCK, {"b_session_id": session_id})
            if not locked:
                raise SessionNotFound(f"no session {session_id!r}")
            metadata = dict(locked[0][0] or {})
            stored = metadata.get(KEY)
            answer = decide(stored if isinstance(stored, dict) else None)
            if isinstance(answer, Keep):
                return [], None
            messages: list[Message] = []
            if batch:
                messages, _ = append_in(ex, session_id, batch, repository.clock())
            if answer is REMOVE:
                metadata.pop(KEY, None)
            else:
                metadata[KEY] = answer
            row = ex.rows(_SET, {"b_session_id": session_id, "b_metadata": metadata})
            return messages, session_from_row(row[0])
    except transport.integrity_errors as exc:
        raise append_error(exc, batch) from None

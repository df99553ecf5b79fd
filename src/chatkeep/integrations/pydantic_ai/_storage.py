"""The store's operations as functions of the sync core (the async keep runs them on its
bridge): find a conversation's record, read its log, save, delete, list.

A conversation is the tenant's session named by its ``conversation_id`` (``sessions.open``:
one per tenant and key, created on first save). Its log is the session's messages; its
record is a state in the session's metadata (:mod:`._record`), replaced with
compare-and-set together with the messages a save adds (``Repository.swap_state``).

Chatkeep's log is append-only: a save may only extend the conversation from its newest
entry. Moving the head back (``branch``, a save of a rewritten history) or starting a
conversation from another's entries (``fork``) is refused with ``InvalidArgument`` before
anything is written.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
)
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from chatkeep.app import Chatkeep
from chatkeep.errors import InvalidArgument, SessionKeyConflict, SessionNotFound
from chatkeep.integrations.pydantic_ai import _convert, _record
from chatkeep.integrations.pydantic_ai._convert import KEY
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession, prepare_batch
from chatkeep.store.procedures import KEEP_STATE, REMOVE_STATE, Batch, KeepState, State
from chatkeep.store.repository import Repository
from chatkeep.store.rows import SessionRow
from chatkeep.validation import INT32_MAX

BRANCHING = ("chatkeep keeps a conversation as an append-only log: a save may only add "
             "messages after the newest one, so branch, fork and saving a rewritten "
             "history are not supported (nothing was written)")


@dataclass(frozen=True, slots=True)
class Place:
    """Where a conversation is kept: its tenant, and what a new session is created with."""

    tenant: Ref
    actor: Ref | None = None
    subject: Ref | None = None
    title: str | None = None
    anonymize_pii: bool = True

    @property
    def scope(self) -> str:
        """The tenant as Pydantic AI's ``scope`` names it."""
        return str(self.tenant)


def open_session(core: Chatkeep, place: Place, key: str) -> ChatSession:
    """The conversation's session, created on first use (race-safe, one per tenant)."""
    return core.sessions.open(key, place.tenant, place.actor, place.subject,
                              title=place.title, anonymize_pii=place.anonymize_pii)


def find_session(core: Chatkeep, tenant: Ref, key: str) -> ChatSession | None:
    """The tenant's session named ``key``, or ``None``."""
    try:
        return core.sessions.by_key(key, tenant)
    except SessionNotFound:
        return None


def read_record(core: Chatkeep, place: Place,
                key: str) -> tuple[ConversationRecord | None, str | None]:
    """The conversation's live record and its session id (``None`` when there is none).
    A store kept for an actor (or a subject) never reads another's conversation: that is
    ``SessionKeyConflict``, as opening it would be."""
    session = find_session(core, place.tenant, key)
    if session is None:
        return None, None
    for what, mine, theirs in (("actor", place.actor, session.actor),
                               ("subject", place.subject, session.subject)):
        if mine is not None and mine != theirs:
            raise SessionKeyConflict(f"conversation {key!r} of tenant {place.tenant} is not "
                                     f"kept for {what} {mine}")
    return _record.record_of(_record.state_of(session.metadata), place.scope), session.id


def read_records(core: Chatkeep, tenant: Ref, limit: int | None) -> list[ConversationRecord]:
    """The tenant's conversations, most recently saved first."""
    records = []
    for session in core.sessions.list(tenant, limit=INT32_MAX):
        record = _record.record_of(_record.state_of(session.metadata), str(tenant))
        if record is not None:
            records.append(record)
    records.sort(key=lambda record: record.updated_at, reverse=True)
    return records if limit is None else records[:limit]


def read_log(core: Chatkeep, tenant: Ref, session_id: str, head: str | None,
             limit: int | None) -> list[ConversationEntry]:
    """The entries up to ``head`` (the last ``limit`` of them), read from the session's
    newest messages backwards: a short window first, the whole log only when needed."""
    if head is None or limit == 0:
        return []
    session = core.sessions.get(session_id, tenant)
    total = session.message_count
    window = total if limit is None else min(total, 4 * limit + 8)
    while True:
        messages = session.messages_after(total - window)
        found, complete = _convert.chain(_convert.carried(messages), head, limit)
        if complete:
            return [ConversationEntry(id=entry, parent_id=parent,
                                      message=_convert.load_message(data))
                    for entry, parent, data in found]
        if window >= total:
            raise SessionNotFound(f"entry {head!r} or one before it is not in session "
                                  f"{session_id}")
        window = min(total, window * 4)


def find_entry(core: Chatkeep, tenant: Ref,
               entry_id: str) -> tuple[str, ConversationEntry]:
    """The session holding ``entry_id`` and the entry. Entries are read through their
    conversation (``read_log``); this walks the tenant's conversations and is only for a
    caller that holds an entry id alone."""
    for session in core.sessions.list(tenant, limit=INT32_MAX):
        if _record.state_of(session.metadata) is None:
            continue
        found = _convert.carried(session.read_messages()).get(entry_id)
        if found is not None:
            return session.id, ConversationEntry(id=entry_id, parent_id=found[0],
                                                 message=_convert.load_message(found[1]))
    raise SessionNotFound(f"no stored entry {entry_id!r} for tenant {tenant}")


def write_record(core: Chatkeep, place: Place, record: ConversationRecord,
                 new_entries: Sequence[ConversationEntry], expected: str | None,
                 output_tools: frozenset[str]) -> str:
    """Store ``record`` and append ``new_entries``, if the stored revision is ``expected``
    (``ConversationConflict`` otherwise). Returns the session id."""
    key = record.conversation_id
    if record.scope is not None and Ref.coerce(record.scope) != place.tenant:
        raise InvalidArgument(f"conversation {key!r} is saved under tenant {place.tenant}, "
                              f"not {record.scope}")
    if record.forked_from is not None or record.branches:
        raise InvalidArgument(BRANCHING)
    _check_chain(record, new_entries)
    session = open_session(core, place, key)
    batch = _batch(core, session, new_entries, output_tools)
    stored = _record.record_state(dataclasses.replace(record, scope=place.scope))
    unfinished: list[str] = []

    def decide(current: State) -> dict[str, Any] | KeepState:
        token = _record.deleting(current)
        if expected is None and token is not None:
            unfinished.append(token)  # a delete left unfinished: finish it first (below)
            return KEEP_STATE
        _check_extends(key, current, expected, record, new_entries)
        return stored

    _, row = _swap(core.repository, session.id, decide, batch)
    if row is not None:
        return session.id
    # The session's previous conversation was deleted but its messages not yet removed:
    # claim the cleanup (so no second writer runs it on our messages), remove, then save.
    mine = _claim_cleanup(core, session.id, key, unfinished[-1])
    session.clear()

    def after_cleanup(current: State) -> dict[str, Any] | KeepState:
        if _record.deleting(current) != mine:
            raise ConversationConflict(key)
        _check_extends(key, None, expected, record, new_entries)
        return stored

    _swap(core.repository, session.id, after_cleanup,
         _batch(core, session, new_entries, output_tools))
    return session.id


def finish_delete(core: Chatkeep, session: ChatSession) -> None:
    """If the session's conversation was deleted but its messages not yet removed (the
    delete was cut short), remove them now: before anything of the session is sent
    again. A writer already doing it is left to it."""
    token = _record.deleting(_record.state_of(session.metadata))
    if token is None:
        return
    try:
        mine = _claim_cleanup(core, session.id, session.key or "", token)
    except ConversationConflict:
        return
    session.clear()

    def finish(current: State) -> dict[str, Any] | KeepState:
        return REMOVE_STATE if _record.deleting(current) == mine else KEEP_STATE

    _swap(core.repository, session.id, finish)


def delete_record(core: Chatkeep, tenant: Ref, key: str, expected: str) -> None:
    """Delete the conversation if its revision is ``expected``: its record goes, and so do
    its messages' bytes, its summary and placeholder vault (``ChatSession.clear``;
    ``privacy.keep_retracted_text`` retracts them instead, for audit). The session
    itself stays, with its billed usage, so a conversation saved again under the same id
    starts empty in the same session."""
    session = find_session(core, tenant, key)
    if session is None:
        raise ConversationConflict(key)
    token = uuid.uuid4().hex

    def start(current: State) -> dict[str, Any] | KeepState:
        if _record.revision_of(current) != expected:
            raise ConversationConflict(key)
        return {"deleting": token}

    _swap(core.repository, session.id, start)
    session.clear()

    def finish(current: State) -> dict[str, Any] | KeepState:
        return REMOVE_STATE if _record.deleting(current) == token else KEEP_STATE

    _swap(core.repository, session.id, finish)


# -- helpers ---------------------------------------------------------------------------------


def _claim_cleanup(core: Chatkeep, session_id: str, key: str, token: str) -> str:
    mine = uuid.uuid4().hex

    def claim(current: State) -> dict[str, Any] | KeepState:
        if _record.deleting(current) != token:
            raise ConversationConflict(key)
        return {"deleting": mine}

    _swap(core.repository, session_id, claim)
    return mine


def _check_chain(record: ConversationRecord, new_entries: Sequence[ConversationEntry]) -> None:
    """The new entries follow one another, and the record's head is the last of them."""
    for before, after in itertools.pairwise(new_entries):
        if after.parent_id != before.id:
            raise InvalidArgument(BRANCHING)
    if new_entries and record.head_id != new_entries[-1].id:
        raise InvalidArgument(BRANCHING)


def _check_extends(key: str, current: State, expected: str | None,
                   record: ConversationRecord,
                   new_entries: Sequence[ConversationEntry]) -> None:
    """The stored revision is ``expected``, and the save extends the stored head."""
    if _record.revision_of(current) != expected:
        raise ConversationConflict(key)
    head = _record.head_of(current)
    if new_entries:
        if new_entries[0].parent_id != head:
            raise InvalidArgument(BRANCHING)
    elif record.head_id != head:
        raise InvalidArgument(BRANCHING)


def _batch(core: Chatkeep, session: ChatSession, new_entries: Sequence[ConversationEntry],
           output_tools: frozenset[str]) -> list[Any]:
    """The append that records ``new_entries`` (validated, counted, billed)."""
    if not new_entries:
        return []
    open_calls: _convert.OpenCalls = {}
    if _answers_stored_calls(new_entries):
        open_calls = _stored_open_calls(session)

    def restore(texts: list[str]) -> list[str]:
        restored: list[str] = core.privacy.restore_payload(session, texts)
        return restored

    drafts = _convert.drafts_of(new_entries, open_calls, restore=restore,
                                output_tools=output_tools)
    return list(prepare_batch(drafts, core.counter))


def _answers_stored_calls(entries: Sequence[ConversationEntry]) -> bool:
    """Whether a tool result among ``entries`` answers a call made before them."""
    called: set[str] = set()
    for entry in entries:
        message = entry.message
        if isinstance(message, ModelRequest):
            if any(isinstance(part, ToolReturnPart) and part.tool_call_id not in called
                   for part in message.parts):
                return True
        else:
            called.update(getattr(part, "tool_call_id", "") for part in message.parts)
    return False


def _stored_open_calls(session: ChatSession) -> _convert.OpenCalls:
    """The calls of the session's last turn still waiting for their result."""
    total = session.message_count
    window = min(total, 16)
    while True:
        live = [m for m in session.messages_after(total - window) if m.retracted_at is None]
        starts = [i for i, m in enumerate(live) if m.role is Role.USER]
        if starts or window >= total:
            turn: list[Message] = live[starts[-1]:] if starts else live
            break
        window = min(total, window * 4)
    answered = {m.tool_call_id for m in turn if m.role is Role.TOOL}
    open_calls: _convert.OpenCalls = {}
    for message in turn:
        for raw, chatkeep_id in _convert.stored_calls(message):
            if chatkeep_id not in answered:
                open_calls.setdefault(raw, []).append(chatkeep_id)
    return open_calls


def _swap(repository: Repository, session_id: str, decide: Callable[[State], Any],
          batch: Batch = ()) -> tuple[list[Message], SessionRow | None]:
    """The conversation record's compare-and-set, atomic with the messages it adds."""
    return repository.swap_state(session_id, KEY, decide, batch)

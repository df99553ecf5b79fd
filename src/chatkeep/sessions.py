"""``ChatSession``: one conversation, bound to the store, and ``SessionService`` to find them.

A session is a thin handle over its database row: every ``add_*`` is one
transaction that assigns the message's ``seq`` and moves the token ledger, and
the handle keeps the row snapshot the write returned. Another process's writes
show after ``refresh()``; ``messages`` always reads the database.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, cast, runtime_checkable

from chatkeep.errors import (
    ChatkeepError,
    InvalidArgument,
    InvalidMessage,
    InvalidTokens,
    SessionKeyConflict,
    SessionNotFound,
)
from chatkeep.messages import (
    Message,
    MessageDraft,
    Role,
    ToolCall,
    Usage,
    parse_tool_calls,
)
from chatkeep.refs import Ref, require_ref
from chatkeep.store.quotas import Settlement
from chatkeep.store.repository import BilledUsage, Repository, SessionRow
from chatkeep.switches import protected_at_creation
from chatkeep.tokens import HeuristicCounter, TokenCounter
from chatkeep.validation import (
    INT32_MAX,
    MODEL_MAX,
    NAME_MAX,
    TITLE_MAX,
    TOOL_CALL_ID_MAX,
    TOOL_NAME_MAX,
    check_bool,
    check_int,
    check_key,
    check_metadata,
    check_optional_text,
    check_text,
)

if TYPE_CHECKING:
    from chatkeep.history.summary import StructuredSummary
    from chatkeep.store.lifecycle import LifecycleStore

PURPOSES = ("chat", "summary", "distil", "manual")
_T = TypeVar("_T")

log = logging.getLogger("chatkeep.sessions")


def _lifecycle_store(repository: Repository) -> LifecycleStore:
    """Forgetting's store procedures on ``repository``'s engine, imported on first use
    (as the wire formats are, by ``add_response`` and ``record``): a program that only
    reads sessions, the CLI's read commands, loads neither (issue 32 item 11)."""
    from chatkeep.store.lifecycle import LifecycleStore

    return LifecycleStore(repository.engine, repository.clock)


def _check_tokens(value: object, what: str) -> int:
    """A token count: an ``int`` from 0 to the ``INTEGER`` column's maximum."""
    return check_int(value, what, error=InvalidTokens, maximum=INT32_MAX)


def _check_usage(usage: object) -> Usage:
    if not isinstance(usage, Usage):
        raise InvalidTokens(f"usage must be a chatkeep.Usage, got {type(usage).__name__}")
    _check_tokens(usage.prompt_tokens, "prompt_tokens")
    _check_tokens(usage.completion_tokens, "completion_tokens")
    return usage


def _check_session_id(session_id: object) -> str:
    """A session id to look up: text the database can compare (a wrong one is simply
    not found)."""
    return check_text(session_id, "session id")


class ChatSession:
    """A conversation: tenant, actor and subject references, messages, tokens, summary."""

    def __init__(self, repository: Repository, row: SessionRow,
                 counter: TokenCounter | None = None, *,
                 keep_retracted_text: bool = False) -> None:
        self._repo = repository
        self._row = row
        self._counter = counter or HeuristicCounter()
        # privacy.keep_retracted_text: delete_last / clear retract (kept for audit).
        self._keep_retracted = keep_retracted_text
        # The quota reservation build_history(max_output_tokens=) holds for the next call
        # (see hold_reservation); add_assistant_response settles it.
        self._reservation: Callable[[Usage | None], object] | HeldReservation | None = None

    def __repr__(self) -> str:
        return (f"ChatSession(id={self.id!r}, tenant={self.tenant}, actor={self.actor}, "
                f"subject={self.subject}, messages={self._row.last_seq})")

    # -- identity and state ----------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id (a time-ordered UUID): all a background job needs."""
        return self._row.id

    @property
    def tenant(self) -> Ref:
        """Who owns the conversation and is billed for it (always set)."""
        return self._row.tenant

    @property
    def actor(self) -> Ref | None:
        """Who speaks; ``None`` for an autonomous run (no personal memory applies)."""
        return self._row.actor

    @property
    def subject(self) -> Ref | None:
        """What the conversation lives inside (a matter, a ticket, ...), if anything."""
        return self._row.subject

    @property
    def key(self) -> str | None:
        """The application's own name for the conversation, unique per tenant (set by
        ``sessions.open``); ``None`` for a session known only by its id."""
        return self._row.key

    @property
    def title(self) -> str | None:
        """An optional label for people."""
        return self._row.title

    @property
    def row(self) -> SessionRow:
        """The database row as of the last write or ``refresh()``."""
        return self._row

    @property
    def repository(self) -> Repository:
        """The store this session reads and writes through."""
        return self._repo

    @property
    def total_tokens(self) -> int:
        """Tokens billed to this session; always equals the sum of its usage ledger."""
        return self._row.total_tokens

    @property
    def summary(self) -> str | None:
        """The running summary of everything up to ``summary_watermark``, as people (and
        the model) read it: its items by section, then the narrative; ``None`` before the
        first fold. The stored form is ``row.summary``; the parsed one
        ``structured_summary``."""
        structured = self.structured_summary
        return None if structured is None else structured.render()

    @property
    def structured_summary(self) -> StructuredSummary | None:
        """The running summary as typed items and a narrative (``None`` before the first
        fold)."""
        # Imported here: chatkeep.history's package imports the compressor, which imports
        # this module.
        from chatkeep.history.summary import StructuredSummary

        return StructuredSummary.load(self._row.summary)

    @property
    def summary_watermark(self) -> int:
        """``seq`` of the last message folded into the summary (0 = none)."""
        return self._row.summary_watermark

    @property
    def message_count(self) -> int:
        """How many messages were appended (the last ``seq``)."""
        return self._row.last_seq

    @property
    def closed(self) -> bool:
        """Whether the session refuses new messages."""
        return self._row.closed_at is not None

    @property
    def metadata(self) -> dict[str, Any]:
        """Your own JSON data, stored with the session."""
        return dict(self._row.metadata)

    @property
    def anonymize_pii(self) -> bool:
        """This conversation's redaction switch (on by default); the app switch must be on
        too. Change it with :meth:`set_anonymize_pii` (a write: properties do no I/O)."""
        return self._row.anonymize_pii

    @anonymize_pii.setter
    def anonymize_pii(self, value: bool) -> None:
        raise InvalidArgument("session.anonymize_pii is read-only: call "
                              "session.set_anonymize_pii(value), which stores the switch")

    def adopt_row(self, row: SessionRow) -> None:
        """Take ``row`` as this session's snapshot: one read or written elsewhere (the
        compressor's read and compare-and-set); a row of another session is
        ``InvalidArgument``."""
        if row.id != self.id:
            raise InvalidArgument("row belongs to another session")
        self._row = row

    def refresh(self) -> ChatSession:
        """Re-read the row (another process may have written)."""
        self._row = self._repo.get_session(self.id)
        return self

    def close(self) -> None:
        """Refuse further messages; the record stays readable."""
        if not self.closed:
            self._row = self._repo.update_session(self.id, closed_at=datetime.now(UTC))

    # -- reading -------------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """Every message in order, tool plumbing included (``read_messages()``)."""
        return self.read_messages()

    def read_messages(self) -> list[Message]:
        """Every message in order, tool plumbing and retracted messages included."""
        return self._repo.read_messages(self.id)

    def set_anonymize_pii(self, value: bool) -> None:
        """Store this conversation's redaction switch (``anonymize_pii`` reads it)."""
        check_bool(value, "anonymize_pii")
        self._row = self._repo.update_session(self.id, anonymize_pii=value)

    def retract_last(self) -> Message | None:
        """Retract the newest live message: kept for the record and marked, but never
        replayed, summarized or distilled again (the Agents SDK's ``pop_item``). Returns
        it, or ``None`` when nothing is live. A message already folded into the summary
        stays in the summary; a fold still in flight loses its compare-and-set and plans
        again without it."""
        message = self._repo.retract_last(self.id)
        self.refresh()
        return message

    def retract_all(self) -> int:
        """Retract every live message and drop the running summary (``clear_session``):
        the record stays, the replay starts empty. Returns how many were retracted."""
        count, self._row = self._repo.retract_all(self.id)
        return count

    def delete_last(self) -> int | None:
        """Remove the newest live message's bytes (the Agents SDK's ``pop_item``): its
        row goes, and a summary that folded it in is dropped (the replay rebuilds from
        what is stored), so no copy stays in the session. Returns its seq, or ``None``
        when nothing is live. With ``privacy.keep_retracted_text`` on it is retracted
        instead (kept for audit, never replayed). Memories distilled from it stay until
        the session is deleted or its actor erased."""
        if self._keep_retracted:
            message = self.retract_last()
            return None if message is None else message.seq
        seq = _lifecycle_store(self._repo).delete_last(self.id)
        self.refresh()
        return seq

    def pop_last(self) -> Message | None:
        """:meth:`delete_last`, answering the message as it was (what the Agents SDK's
        ``pop_item`` returns), or ``None`` when nothing is live. With
        ``privacy.keep_retracted_text`` on it is ``retract_last``."""
        if self._keep_retracted:
            return self.retract_last()
        message = _lifecycle_store(self._repo).pop_last(self.id)
        self.refresh()
        return message

    def clear(self) -> int:
        """Remove every message's bytes (``clear_session``, a framework store's
        ``delete``): messages, tool calls, the summary, its fold records and the
        placeholder vault go; the session stays, empty, under its key. Returns how many
        messages went. With ``privacy.keep_retracted_text`` on it is ``retract_all``."""
        if self._keep_retracted:
            return self.retract_all()
        count = _lifecycle_store(self._repo).delete_all(self.id)
        self.refresh()
        return count

    def messages_after(self, seq: int) -> list[Message]:
        """Messages with ``seq`` greater than ``seq`` (what compression reads)."""
        check_int(seq, "seq", maximum=INT32_MAX)
        return self._repo.read_messages(self.id, after_seq=seq)

    # -- writing -------------------------------------------------------------------------

    def add_user(self, content: str, *, name: str | None = None,
                 metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a user message."""
        return self.add_message(Role.USER, content, name=name, metadata=metadata)

    def add_system(self, content: str, *, metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an instruction added mid-session. ``build_history`` replays every stored
        system message pinned after the system prompt, in order: never folded, never
        summarized, counted in the budget."""
        return self.add_message(Role.SYSTEM, content, metadata=metadata)

    def add_assistant(self, content: str | None = None, *,
                      tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                      usage: Usage | None = None, model: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Message:
        """Record an assistant turn: text, tool calls, or both; ``usage`` bills the chat call."""
        return self.add_message(Role.ASSISTANT, content, tool_calls=tool_calls, usage=usage,
                                model=model, metadata=metadata)

    def add_assistant_response(self, response: Any, *,
                               metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a model's answer as the provider SDK returned it: its text, its tool calls
        with their ids, reasoning/thinking payloads verbatim, and its usage (purpose ``chat``).

        Accepts an OpenAI ``ChatCompletion`` (object or dict), its ``choices[0].message``,
        a streamed completion (the list of chunks, or the SDK's stream object after it
        finished), an OpenAI Responses ``Response``, or an Anthropic ``Message``.
        """
        from chatkeep.formats import read_response

        metadata = check_metadata(metadata, error=InvalidMessage)
        turn = _reading("a model response", read_response, response)
        held, self._reservation = self._reservation, None
        if held is None or not _is_reservation(held):
            message = self.add_drafts([MessageDraft.from_turn(turn, metadata)])[0]
            if held is not None:  # the reservation build_history held, at the real usage
                cast("Callable[[Usage | None], object]", held)(turn.usage)
            return message
        # Settled at the real usage in the append's own transaction (no commit of its
        # own); if the append fails, settled on its own (a no-op if the append's
        # statement settled it already).
        settlement = held._settlement(turn.usage)
        try:
            messages, self._row = self._repo.append_messages(
                self.id, prepare_batch([MessageDraft.from_turn(turn, metadata)],
                                       self._counter), settle=settlement)
        except BaseException:
            _settle_anyway(held, turn.usage)
            raise
        if settlement is None:
            held.settle(turn.usage)
        else:
            held._settled()
        return messages[0]

    def record(self, payload: Any, *, format: str) -> list[Message]:
        """Record request-side messages written in a wire format, atomically (all or none).

        ``format`` is ``"openai_chat"`` (a list of chat messages), ``"openai_responses"``
        (input items, or a string) or ``"anthropic_messages"`` (a list of ``MessageParam``:
        tool results sent as a user message of ``tool_result`` blocks become tool results).
        """
        from chatkeep.formats import get_format

        wire = get_format(format)
        return self.add_drafts(_reading(f"a {wire.NAME} payload", wire.from_wire, payload))

    def add_drafts(self, drafts: Sequence[MessageDraft]) -> list[Message]:
        """Validate and append several messages in one transaction: all of them or none."""
        messages, self._row = self._repo.append_messages(
            self.id, prepare_batch(drafts, self._counter))
        return messages

    def add_tool_result(self, tool_call_id: str, content: str | Mapping[str, Any] | list[Any],
                        *, name: str | None = None,
                        metadata: Mapping[str, Any] | None = None) -> Message:
        """Record a tool's result; ``tool_call_id`` must answer an earlier, unanswered call.
        A mapping or list is stored as its JSON text."""
        if isinstance(content, Mapping | list):
            try:
                content = json.dumps(content, ensure_ascii=False, default=str)
            except (TypeError, ValueError, RecursionError) as exc:
                raise InvalidMessage(f"tool result content is not JSON: {exc}") from None
        elif not isinstance(content, str):
            raise InvalidMessage("tool result content must be a string, a mapping or a list "
                                 f"(use '' for an empty result), got {type(content).__name__}")
        return self.add_message(Role.TOOL, content, tool_call_id=tool_call_id, name=name,
                                metadata=metadata)

    def add_message(self, role: Role | str, content: str | None, *,
                    tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
                    tool_call_id: str | None = None, name: str | None = None,
                    usage: Usage | None = None, model: str | None = None,
                    metadata: Mapping[str, Any] | None = None) -> Message:
        """Validate and append any message; the generic form behind the ``add_*`` helpers."""
        draft = MessageDraft(Role.parse(role), content, _tool_calls(tool_calls),
                             tool_call_id, name, usage, model,
                             check_metadata(metadata, error=InvalidMessage))
        return self.add_drafts([draft])[0]

    def add_tokens(self, n: int, *, purpose: str = "manual", model: str | None = None) -> int:
        """Bill ``n`` tokens to this session (and its tenant); returns the new total."""
        _check_tokens(n, "tokens")
        return self.record_usage(purpose, Usage(0, n), model)

    def record_usage(self, purpose: str, usage: Usage, model: str | None = None) -> int:
        """Bill a model call made on this session's behalf; returns the new total."""
        if not isinstance(purpose, str) or purpose not in PURPOSES:
            raise InvalidTokens(
                f"unknown usage purpose {purpose!r} (expected one of {PURPOSES})"[:300])
        _check_usage(usage)
        check_optional_text(model, "model", error=InvalidTokens, max_length=MODEL_MAX)
        self._row = self._repo.add_usage(self.id, BilledUsage(purpose, usage, model))
        return self._row.total_tokens


def _reading(what: str, read: Callable[[Any], _T], payload: Any) -> _T:
    """A wire-format reader's result; a payload it trips over (a field of the wrong type
    deep inside) is ``InvalidMessage`` too, never a bare ``TypeError``."""
    try:
        return read(payload)
    except ChatkeepError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError,
            RecursionError) as exc:
        raise InvalidMessage(f"not {what} chatkeep can read: "
                             f"{type(exc).__name__}: {exc}"[:500]) from None


def _tool_calls(raw: object) -> tuple[ToolCall, ...]:
    """``tool_calls=`` as given to ``add_message``/``add_assistant``: ``ToolCall`` objects
    or OpenAI-format dicts, in a list."""
    if raw is None:
        return ()
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise InvalidMessage(f"tool_calls must be a list, got {type(raw).__name__}")
    try:
        return parse_tool_calls(raw)
    except ChatkeepError:
        raise
    except (AttributeError, TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessage(f"tool_calls: not an OpenAI tool call: {exc}") from None


def validate_draft(draft: object) -> MessageDraft:
    """Everything a message must satisfy before it is written, in one place (``add_*``,
    ``add_drafts``, ``record`` and the importer all come here): the role rules, and every
    value the database would refuse, refused with the field named."""
    if not isinstance(draft, MessageDraft):
        raise InvalidMessage(f"expected a MessageDraft, got {type(draft).__name__}")
    role = Role.parse(draft.role)
    content = draft.content
    if content is not None:
        check_text(content, "content", error=InvalidMessage)
    calls = _checked_calls(draft.tool_calls)
    tool_call_id = check_optional_text(draft.tool_call_id, "tool_call_id", error=InvalidMessage,
                                       max_length=TOOL_CALL_ID_MAX)
    check_optional_text(draft.name, "name", error=InvalidMessage, max_length=NAME_MAX)
    check_optional_text(draft.model, "model", error=InvalidMessage, max_length=MODEL_MAX)
    if draft.usage is not None:
        _check_usage(draft.usage)
    metadata = check_metadata(draft.metadata, error=InvalidMessage)
    native = check_metadata(draft.native, "native", error=InvalidMessage)
    _check_role_rules(role, content, calls, tool_call_id, native)
    if (role is not draft.role or calls is not draft.tool_calls
            or metadata is not draft.metadata or native is not draft.native):
        draft = MessageDraft(role, content, calls, tool_call_id, draft.name, draft.usage,
                             draft.model, metadata, native)
    return draft


def _checked_calls(calls: object) -> tuple[ToolCall, ...]:
    """A draft's tool calls as a tuple of ``ToolCall``, each id, name and arguments a
    storable text, the ids distinct."""
    checked = calls if isinstance(calls, tuple) else _tool_calls(calls)
    for call in checked:
        if not isinstance(call, ToolCall):
            raise InvalidMessage(f"tool_calls must hold ToolCall objects, "
                                 f"got {type(call).__name__}")
        check_text(call.id, "tool call id", error=InvalidMessage, max_length=TOOL_CALL_ID_MAX)
        check_text(call.name, f"tool call {call.id!r} name", error=InvalidMessage,
                   max_length=TOOL_NAME_MAX)
        check_text(call.arguments, f"tool call {call.id!r} arguments", error=InvalidMessage)
    if len({c.id for c in checked}) != len(checked):
        raise InvalidMessage("tool call ids within one message must be distinct")
    return checked


def _check_role_rules(role: Role, content: str | None, calls: tuple[ToolCall, ...],
                      tool_call_id: str | None, native: Mapping[str, Any]) -> None:
    """What each role carries: calls only on assistant messages, a ``tool_call_id`` only
    on tool messages (and always there), and text where the role needs it."""
    if calls and role is not Role.ASSISTANT:
        raise InvalidMessage(f"only assistant messages carry tool calls, not {role.value}")
    if tool_call_id is not None and role is not Role.TOOL:
        raise InvalidMessage(f"only tool messages carry a tool_call_id, not {role.value}")
    if role is Role.ASSISTANT:
        # (A reasoning item alone is an assistant message too: the Agents SDK stores it so.)
        if not calls and not (content and content.strip()) and not native:
            raise InvalidMessage("an assistant message needs text or tool calls")
    elif role is Role.TOOL:
        if not tool_call_id:
            raise InvalidMessage("a tool message needs the tool_call_id it answers")
        if content is None:
            raise InvalidMessage("a tool message needs content (use '' for an empty result)")
    elif not (content and content.strip()):
        raise InvalidMessage(f"a {role.value} message needs non-empty text")


def prepare_batch(drafts: Sequence[MessageDraft], counter: TokenCounter,
                  ) -> list[tuple[MessageDraft, int, BilledUsage | None]]:
    """Validate ``drafts`` and pair each with its token count and the usage it bills
    (purpose ``chat``): what ``Repository.append_messages`` takes."""
    if isinstance(drafts, str | bytes | Mapping) or not isinstance(drafts, Sequence):
        raise InvalidMessage(f"expected a list of MessageDraft, got {type(drafts).__name__}")
    batch = []
    for item in drafts:
        draft = validate_draft(item)
        billed = None if draft.usage is None else BilledUsage("chat", draft.usage, draft.model)
        tokens = counter.count(draft.content or "") + sum(
            counter.count(c.name + c.arguments) for c in draft.tool_calls)
        batch.append((draft, check_int(tokens, "message tokens", error=InvalidMessage), billed))
    return batch


class SessionService:
    """Create, find and list sessions (``keep.sessions``)."""

    def __init__(self, repository: Repository, counter: TokenCounter | None = None, *,
                 app_anonymize_pii: bool = False, keep_retracted_text: bool = False) -> None:
        self._repo = repository
        self._counter = counter or HeuristicCounter()
        # The application's switch (privacy.anonymize_pii), recorded on each session
        # created under it: a process started without it must still redact that session.
        self._app_anonymize_pii = check_bool(app_anonymize_pii, "app_anonymize_pii")
        self._keep_retracted = check_bool(keep_retracted_text, "keep_retracted_text")
        self._lifecycle_built: LifecycleStore | None = None
        self.on_delete: list[Callable[[str], None]] = []
        """Called with a deleted session's id (the keep clears its caches there)."""

    def _lifecycle(self) -> LifecycleStore:
        """Forgetting's store procedures (``delete``), built on first use."""
        if self._lifecycle_built is None:
            self._lifecycle_built = _lifecycle_store(self._repo)
        return self._lifecycle_built

    def _wrap(self, row: SessionRow) -> ChatSession:
        return ChatSession(self._repo, row, self._counter,
                           keep_retracted_text=self._keep_retracted)

    def create(self, tenant: Ref, actor: Ref | None = None, subject: Ref | None = None, *,
               title: str | None = None, anonymize_pii: bool = True,
               metadata: Mapping[str, Any] | None = None) -> ChatSession:
        """Start a conversation owned by ``tenant``; ``actor=None`` is an autonomous run.
        Created while both switches are on, it is marked ``pii_protected``: every process
        redacts it, whatever its own configuration."""
        values = check_session(tenant, actor, subject, title=title,
                               anonymize_pii=anonymize_pii, metadata=metadata)
        protected = protected_at_creation(self._app_anonymize_pii, values["anonymize_pii"])
        return self._wrap(self._repo.create_session(tenant, actor, subject,
                                                    pii_protected=protected, **values))

    def open(self, key: str, tenant: Ref, actor: Ref | None = None,
             subject: Ref | None = None, *, title: str | None = None,
             anonymize_pii: bool = True,
             metadata: Mapping[str, Any] | None = None) -> ChatSession:
        """The tenant's conversation named by the application's ``key`` (a framework's
        ``session_id``, ``conversation_id`` or ``thread_id``), created on first use.

        Opening one key from many processes at once yields one session. Two tenants may use
        the same key independently. An existing session must have been created for the same
        ``actor`` and ``subject`` (else ``SessionKeyConflict``: it would mix two
        conversations); ``title``, ``anonymize_pii`` and ``metadata`` apply on creation only.
        """
        key = check_key(key)
        values = check_session(tenant, actor, subject, title=title,
                               anonymize_pii=anonymize_pii, metadata=metadata)
        protected = protected_at_creation(self._app_anonymize_pii, values["anonymize_pii"])
        row, created = self._repo.open_session(key, tenant, actor, subject,
                                               pii_protected=protected, **values)
        if not created:
            _check_same_parties(row, actor, subject)
        return self._wrap(row)

    def by_key(self, key: str, tenant: Ref) -> ChatSession:
        """The tenant's conversation named ``key`` (``SessionNotFound`` if none: another
        tenant's key is not found either)."""
        key = check_key(key)
        require_ref(tenant, "tenant")
        row = self._repo.find_session(key, tenant)
        if row is None:
            raise SessionNotFound(f"no session with key {key!r} for tenant {tenant}")
        return self._wrap(row)

    def get(self, session_id: str, tenant: Ref) -> ChatSession:
        """Load one of ``tenant``'s sessions (another tenant's is ``SessionNotFound``, as a
        missing one is). ``tenant`` is required: a handler that forgot it would read any
        tenant's session. A job holding only an id calls :meth:`get_unscoped`."""
        _check_session_id(session_id)
        require_ref(tenant, "tenant")
        return self._wrap(self._repo.get_session(session_id, tenant))

    def get_unscoped(self, session_id: str) -> ChatSession:
        """Load a session by its id alone, whatever its tenant: for background jobs and
        operators' tools that hold only the id (read ``session.tenant`` before acting on
        it). Request handlers call :meth:`get` with the caller's tenant."""
        _check_session_id(session_id)
        return self._wrap(self._repo.get_session(session_id))

    def tenant_of(self, session_id: str) -> Ref:
        """The tenant that owns ``session_id`` (what a job bills)."""
        _check_session_id(session_id)
        return self._repo.get_session(session_id).tenant

    def delete(self, session_id: str, tenant: Ref, *, by: str | None = None) -> dict[str, int]:
        """Delete one of ``tenant``'s conversations and every row holding its content:
        messages (text, tool calls and results, names, metadata, native payloads), the
        summary and fold records, the vault, key, title, metadata (integration state with
        it), and the memories distilled from it that carry its values or are personal to
        its actor (other memories stay, their link to it cut). The ledger keeps its
        numbers, unlinked. Another tenant's session, or one already deleted, is
        ``SessionNotFound``; a held one is ``ScopeOnHold`` (nothing removed). ``by``
        names who asked, for the lifecycle log. Returns the counts per surface."""
        _check_session_id(session_id)
        require_ref(tenant, "tenant")
        if by is not None:
            check_text(by, "by", max_length=NAME_MAX)
        counts = self._lifecycle().delete_session(session_id, tenant, by=by)
        for hook in self.on_delete:
            hook(session_id)
        return counts

    def list(self, tenant: Ref, *, actor: Ref | None = None, subject: Ref | None = None,
             limit: int = 50) -> list[ChatSession]:
        """A tenant's sessions, most recently active first."""
        require_ref(tenant, "tenant")
        if actor is not None:
            require_ref(actor, "actor")
        if subject is not None:
            require_ref(subject, "subject")
        check_int(limit, "limit", minimum=1, maximum=INT32_MAX)
        return [self._wrap(r) for r in self._repo.list_sessions(
            tenant, actor=actor, subject=subject, limit=limit)]


def _check_same_parties(row: SessionRow, actor: Ref | None, subject: Ref | None) -> None:
    for what, stored, asked in (("actor", row.actor, actor), ("subject", row.subject, subject)):
        if stored != asked:
            raise SessionKeyConflict(
                f"session {row.key!r} of tenant {row.tenant} was created with {what} "
                f"{_shown(stored)}, not {_shown(asked)}; open it with the same {what}, or "
                "use another key")


def _shown(ref: Ref | None) -> str:
    return "none" if ref is None else str(ref)


@runtime_checkable
class HeldReservation(Protocol):
    """What ``build_history(..., max_output_tokens=N)`` holds for the session's next
    answer: a quota ``Reservation`` (its settle can join the answer's append)."""

    def settle(self, used: object = None) -> bool:
        """Settle on its own, at ``used``."""
        ...

    def _settlement(self, used: object = None) -> Settlement | None:
        """The settle as a value the append's transaction runs (``None``: settle it on
        its own)."""
        ...

    def _settled(self) -> None:
        """The append that ran the settlement committed."""
        ...


def _is_reservation(held: object) -> TypeGuard[HeldReservation]:
    """Whether ``held`` is a :class:`HeldReservation` rather than a callable: its
    members looked up here (``isinstance`` on the protocol collects them on every call,
    the costliest step of settling an answer)."""
    return all(callable(getattr(held, name, None))
               for name in ("settle", "_settlement", "_settled"))


def hold_reservation(session: ChatSession,
                     settle: Callable[[Usage | None], object] | HeldReservation | None
                     ) -> None:
    """Hold ``settle`` for ``session``'s next recorded answer: ``add_assistant_response``
    settles it at the answer's usage (``None``: none reported, so the reserved amount
    counts): a ``Reservation`` in the append's own transaction, a callable after it.
    What ``build_history(..., max_output_tokens=N)`` uses; a newer hold replaces an
    older one, which its lease then ends."""
    session._reservation = settle


def _settle_anyway(held: HeldReservation, usage: Usage | None) -> None:
    """After a failed append: settle the reservation on its own (the call was made; a
    settle its statement already ran makes this a no-op), never hiding the failure."""
    try:
        held.settle(usage)
    except Exception:
        log.warning("could not settle a quota reservation after a failed append "
                    "(its lease will end it)", exc_info=True)


def check_session(tenant: object, actor: object = None, subject: object = None, *,
                  title: object = None, anonymize_pii: object = True,
                  metadata: object = None) -> dict[str, Any]:
    """Check what a new session is created with (``create`` and the importer); returns
    the column values for ``Repository.create_session``."""
    require_ref(tenant, "tenant")
    if actor is not None:
        require_ref(actor, "actor")
    if subject is not None:
        require_ref(subject, "subject")
    return {"title": check_optional_text(title, "title", max_length=TITLE_MAX),
            "anonymize_pii": check_bool(anonymize_pii, "anonymize_pii"),
            "metadata": check_metadata(metadata)}

"""Import a JSON Lines file of OpenAI chat messages into a new session: all of it, or nothing.

Each line is read by the ``openai_chat`` wire format (the same reader as
``session.record(..., format="openai_chat")``) and checked by the same rules as every
``add_*`` call, so the file is refused with its name and line number for anything the
store would refuse: broken JSON, an unknown role, an assistant line with neither text nor
calls, image-only content, a tool result answering no earlier call, a reused tool-call
id, a value too long for its column, a NUL character. Only then are the session and
every message written, in one transaction: an import never leaves a half-filled or empty
session behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatkeep.errors import ChatkeepError, InvalidMessage
from chatkeep.messages import MessageDraft, Role
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession, check_session, prepare_batch, validate_draft
from chatkeep.switches import protected_at_creation

if TYPE_CHECKING:
    from chatkeep.app import Chatkeep


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """One checked line, ready to append: the draft and the line it came from."""

    line: int
    draft: MessageDraft

    @property
    def role(self) -> Role:
        """The message's role (what a progress hook usually looks at)."""
        return self.draft.role


def parse_lines(lines: Iterable[str], source: str = "<input>") -> list[ImportedMessage]:
    """Parse and check OpenAI-format messages, one JSON object per non-blank line; the
    first problem is an ``InvalidMessage`` naming ``source`` and the line."""
    parsed: list[ImportedMessage] = []
    declared: dict[str, int] = {}  # tool call id -> line of the call
    answered: dict[str, int] = {}  # tool call id -> line of its result
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            draft = _parse_line(line)
            for call in draft.tool_calls:
                if call.id in declared:
                    raise InvalidMessage(f"tool call id {call.id!r} is already used on line "
                                         f"{declared[call.id]}")
            if draft.role is Role.TOOL and draft.tool_call_id is not None:
                call_id = draft.tool_call_id
                if call_id not in declared:
                    raise InvalidMessage(
                        f"tool result for {call_id!r} answers no earlier call")
                if call_id in answered:
                    raise InvalidMessage(f"tool call {call_id!r} was already answered on line "
                                         f"{answered[call_id]}")
                answered[call_id] = number
            declared.update((c.id, number) for c in draft.tool_calls)
        except InvalidMessage as exc:
            raise InvalidMessage(f"{source}, line {number}: {exc}") from None
        parsed.append(ImportedMessage(number, draft))
    if not parsed:
        raise InvalidMessage(f"{source}: no messages to import (the file is empty)")
    return parsed


def _parse_line(line: str) -> MessageDraft:
    try:
        data = json.loads(line)
    except RecursionError:
        raise InvalidMessage("the JSON is nested too deeply") from None
    except ValueError as exc:
        raise InvalidMessage(f"not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise InvalidMessage(f"expected a JSON object, got {type(data).__name__}")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidMessage(f"name must be a string, got {type(name).__name__}")
    if data.get("role") == "assistant" and data.get("tool_call_id") is not None:
        raise InvalidMessage("only tool messages carry a tool_call_id")
    # The wire formats load on the first line read: the CLI imports this module, and its
    # other commands start without them (issue 32 item 11).
    from chatkeep.formats import openai_chat

    try:
        (draft,) = openai_chat.from_wire([data])
    except ChatkeepError as exc:
        raise InvalidMessage(_unprefixed(str(exc))) from None
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        raise InvalidMessage(f"not an OpenAI chat message: {exc}") from None
    return validate_draft(draft)


def _unprefixed(message: str) -> str:
    """The reader numbers messages within its payload; here each line is one message."""
    for prefix in ("message 0: ", "message 0 "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def read_jsonl(path: str | Path) -> list[ImportedMessage]:
    """Parse a ``.jsonl`` file of OpenAI-format messages (UTF-8, a BOM is allowed)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidMessage(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InvalidMessage(f"{path}, line {line}: not UTF-8 text (byte "
                             f"0x{raw[exc.start]:02x} at offset {exc.start})") from None
    # Only "\n" ends a line: str.splitlines() would also split inside a JSON string at
    # U+2028 and other characters JSON allows unescaped.
    return parse_lines((line.removesuffix("\r") for line in text.split("\n")), str(path))


def import_messages(keep: Chatkeep, messages: Iterable[ImportedMessage], tenant: Ref,
                    actor: Ref | None = None, subject: Ref | None = None, *,
                    title: str | None = None, anonymize_pii: bool = True,
                    metadata: Mapping[str, Any] | None = None) -> ChatSession:
    """Create a session and append ``messages`` in one transaction; returns the session.
    Nothing is written unless everything is (an empty list is refused)."""
    values = check_session(tenant, actor, subject, title=title, anonymize_pii=anonymize_pii,
                           metadata=metadata)
    batch = prepare_batch([m.draft for m in messages], keep.counter)
    if not batch:
        raise InvalidMessage("no messages to import")
    # Imported under the application switch: protected like any session created under it.
    protected = protected_at_creation(keep.config.privacy.anonymize_pii,
                                      bool(values["anonymize_pii"]))
    _, row = keep.repository.create_session_with_messages(tenant, actor, subject, batch,
                                                          pii_protected=protected, **values)
    return ChatSession(keep.repository, row, keep.counter)


def import_file(keep: Chatkeep, path: str | Path, tenant: Ref, actor: Ref | None = None,
                subject: Ref | None = None, *, title: str | None = None) -> ChatSession:
    """``read_jsonl`` then ``import_messages``: the file becomes one new session (titled
    with the file's name unless ``title`` is given), or nothing is written."""
    messages = read_jsonl(path)
    return import_messages(keep, messages, tenant, actor, subject,
                           title=Path(path).name if title is None else title)


def append_all(session: ChatSession, messages: Iterable[ImportedMessage],
               progress: Callable[[ImportedMessage], None] | None = None) -> int:
    """Append checked messages to an existing session one by one (each its own
    transaction), calling ``progress`` after each: the demo's replay. Returns how many
    were written."""
    count = 0
    for message in messages:
        session.add_drafts([message.draft])
        count += 1
        if progress is not None:
            progress(message)
    return count

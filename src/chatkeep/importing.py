"""Read OpenAI-format messages (JSON Lines) and append them to a session.

The whole file is parsed and checked before anything is written, so a bad line
(unknown role, a tool result answering no earlier call, broken JSON) names its
line number and leaves the database untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatkeep.errors import ChatkeepError, InvalidMessage
from chatkeep.messages import Role, ToolCall, parse_tool_calls
from chatkeep.sessions import ChatSession


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """One checked line, ready to append."""

    line: int
    role: Role
    content: str | None
    tool_calls: tuple[ToolCall, ...]
    tool_call_id: str | None
    name: str | None


def parse_lines(lines: Iterable[str], source: str = "<input>") -> list[ImportedMessage]:
    """Parse and check OpenAI-format messages, one JSON object per non-blank line."""
    parsed: list[ImportedMessage] = []
    open_calls: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, Mapping):
                raise InvalidMessage("expected a JSON object")
            message = _parse(number, data)
            if message.role is Role.TOOL:
                if message.tool_call_id not in open_calls:
                    raise InvalidMessage(
                        f"tool result for {message.tool_call_id!r} answers no earlier call")
                open_calls.discard(message.tool_call_id)
            open_calls.update(c.id for c in message.tool_calls)
        except (ValueError, ChatkeepError) as exc:
            raise InvalidMessage(f"{source}, line {number}: {exc}") from None
        parsed.append(message)
    return parsed


def _parse(number: int, data: Mapping[str, Any]) -> ImportedMessage:
    role = Role.parse(data.get("role"))
    content = data.get("content")
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if content is not None and not isinstance(content, str):
        raise InvalidMessage("content must be a string, a list of parts, or null")
    tool_call_id = data.get("tool_call_id")
    return ImportedMessage(number, role, content, parse_tool_calls(data.get("tool_calls")),
                           str(tool_call_id) if tool_call_id is not None else None,
                           data.get("name"))


def read_jsonl(path: str | Path) -> list[ImportedMessage]:
    """Parse a ``.jsonl`` file of OpenAI-format messages."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidMessage(f"cannot read {path}: {exc}") from exc
    return parse_lines(text.splitlines(), str(path))


def append_all(session: ChatSession, messages: Iterable[ImportedMessage],
               progress: Callable[[ImportedMessage], None] | None = None) -> int:
    """Append checked messages in order; returns how many were written."""
    count = 0
    for message in messages:
        session.add_message(message.role, message.content, tool_calls=message.tool_calls,
                            tool_call_id=message.tool_call_id, name=message.name)
        count += 1
        if progress is not None:
            progress(message)
    return count

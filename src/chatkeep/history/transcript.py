"""Render replayable messages as plain text for a model to read (summarizer, distiller)."""

from __future__ import annotations

from collections.abc import Sequence

from chatkeep.messages import Message

SPEAKER = {"user": "User", "assistant": "Assistant"}


def transcript(messages: Sequence[Message]) -> str:
    """``User: ...`` / ``Assistant: ...`` lines; tool plumbing never appears."""
    lines = []
    for message in messages:
        text = message.replay_text
        if text is not None:
            lines.append(f"{SPEAKER[message.role.value]}: {text.strip()}")
    return "\n\n".join(lines)

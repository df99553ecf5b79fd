"""Chat Completions answers as the OpenAI SDK returns them (as dicts), with their usage
(40 prompt and 8 completion tokens): what a hand-written loop hands
``add_assistant_response`` in the tests that need no model server."""

from __future__ import annotations

from typing import Any


def chat_answer(text: str | None = "Tomorrow.", *, call_id: str | None = None,
                answer_id: str = "c1") -> dict[str, Any]:
    """An answer with ``text`` (``None``: no text) and, with ``call_id``, one tool call
    under that id."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call_id:
        message["tool_calls"] = [{"id": call_id, "type": "function",
                                  "function": {"name": "track", "arguments": "{}"}}]
    return {"id": answer_id, "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if call_id else "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}

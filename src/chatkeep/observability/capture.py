"""Content capture: off by default; when on, only what left through the egress.

The conventions put a request's messages on ``gen_ai.input.messages``. chatkeep captures
them only when asked (:func:`configure`, or the conventions' environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``), and only from the body
:func:`chatkeep.privacy.egress.outgoing` returned: the placeholders the model saw, never
the caller's text. Replies are not captured (they come back before the placeholders are
restored, and a span is no place to restore them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_capture = [os.environ.get(_ENV, "").strip().lower() == "true"]


def configure(*, capture_content: bool) -> None:
    """Turn content capture on or off for this process (default: off, or what
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says)."""
    _capture[0] = bool(capture_content)


def capture_enabled() -> bool:
    """Whether spans carry the scrubbed request bodies (``gen_ai.input.messages``)."""
    return _capture[0]


def input_messages(body: Sequence[dict[str, Any]]) -> str:
    """``body`` (as the egress returned it) in the conventions' message shape: a JSON list
    of ``{"role", "parts": [{"type": "text", "content"}]}``."""
    out = []
    for message in body:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(
            content, ensure_ascii=False, default=str)
        out.append({"role": str(message.get("role", "user")),
                    "parts": [{"type": "text", "content": text}]})
    return json.dumps(out, ensure_ascii=False)

"""Real values back into streamed model output, chunk by chunk.

A model that writes ``<EMAIL_1>`` may stream it as ``"<EMA"`` then ``"IL_1> thanks"``:
restoring each chunk on its own would show the user half a placeholder. A
:class:`StreamRestorer` holds back the tail of a chunk that could still become a
placeholder-shaped token (``<``, backslashes, ``TYPE_N``, ``>``; see
:mod:`chatkeep.privacy.escaping`) and releases it, restored, once the next chunk settles
it. What it emits, joined, is exactly ``restore`` of the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["StreamRestorer"]

#: A prefix of a placeholder-shaped token at the very end of the text (no ``>`` yet).
_OPEN_TAIL = re.compile(r"<\\*(?:[A-Z][A-Z0-9_]*)?\Z")


class StreamRestorer:
    """Restores a stream of text chunks with ``restore`` (a whole-text restore: a
    session's ``PrivacyGuard.restore``), never splitting a placeholder."""

    def __init__(self, restore: Callable[[str], str]) -> None:
        self._restore = restore
        self._held = ""

    def feed(self, chunk: str) -> str:
        """The restored text that ``chunk`` settles (possibly empty): everything up to a
        tail that may still be the start of a placeholder."""
        text = self._held + chunk
        start = text.rfind("<")
        if start >= 0 and _OPEN_TAIL.match(text, start):
            self._held = text[start:]
            text = text[:start]
        else:
            self._held = ""
        return self._restore(text) if text else ""

    @property
    def held(self) -> str:
        """The text held back so far, as written (it may still become a placeholder)."""
        return self._held

    def flush(self) -> str:
        """What is still held at the end of the stream, restored."""
        held, self._held = self._held, ""
        return self._restore(held) if held else ""
